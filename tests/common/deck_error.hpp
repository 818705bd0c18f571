#pragma once
// The InputError a minimal deck with the given model gives, for tests of
// exact shape-error messages.

#include <string>
#include <vector>

#include "gpipe/core/error.hpp"
#include "gpipe/io/deck.hpp"

namespace gpipe::test {

/// parse_deck's InputError text for a deck named `file` whose model is
/// `input` (e.g. "[1, 28, 28]") and `layers` (a YAML flow list on line 3),
/// or "no error".
inline std::string deck_error(const std::string& input, const std::string& layers,
                              const std::string& file) {
  const std::string text = "model:\n  input: " + input + "\n  layers: " + layers +
                           "\ndata: {train_images: a, train_labels: b, test_images: c, test_labels: d}"
                           "\ntraining: {epochs: 1, batch_size: 4}\n";
  try {
    parse_deck(text, file);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

/// parse_deck's InputError text for the deck `text` named "deck.yaml" with
/// the --set overrides `sets`, or "no error".
inline std::string deck_text_error(const std::string& text, const std::vector<std::string>& sets = {}) {
  try {
    parse_deck(text, "deck.yaml", sets);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace gpipe::test
