// The shape pass (model/shapes.hpp) checks every tensor a layer's keys size
// (output per sample, parameters, state, saved state) against 2^31 - 1
// values before anything is allocated, naming the layer, its input, the
// tensor and the product of its extents; a 64-bit overflow of a shape's
// product is an error too (instances: dense's weight, units x inputs;
// conv2d's output, filters x height x width; a flattened input).

#include <gtest/gtest.h>

#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/model/shapes.hpp"

namespace gpipe {
namespace {

std::string shape_error(const std::string& input, const std::string& layers) {
  std::string text = test::deck_text(layers, 1, 4, 1);
  const std::string from = "input: 1", to = "input: " + input;
  text.replace(text.find(from), from.size(), to);
  try {
    const Deck deck = parse_deck(text, "d.yaml");
    model_shapes(deck.model);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& what, const std::string& part) {
  EXPECT_NE(what.find(part), std::string::npos) << what << "\n  does not contain: " << part;
}

TEST(ShapeOverflow, DenseWeightUnitsTimesInputs) {
  const std::string e = shape_error("4", "[{type: dense, units: 1073741824}]");
  expect_contains(e, "layer 0 (dense) on input [4]: its parameter '");
  expect_contains(e, "would have ");
  expect_contains(e, "1073741824");
  expect_contains(e, " values, more than 2^31 - 1; reduce the layer's sizes or the input");
}

TEST(ShapeOverflow, Conv2dOutputFiltersTimesPixels) {
  const std::string e = shape_error("[1, 2, 2]", "[{type: conv2d, filters: 1073741824, kernel: 1}, {type: flatten}]");
  expect_contains(e, "layer 0 (conv2d) on input [1, 2, 2]: its output [1073741824, 2, 2] would have "
                     "1073741824 x 2 x 2 values, more than 2^31 - 1; reduce the layer's sizes or the input");
}

TEST(ShapeOverflow, WithinTheLimitIsAccepted) {
  EXPECT_EQ(shape_error("4", "[{type: dense, units: 2}]"), "");
  EXPECT_EQ(shape_error("[1, 2, 2]", "[{type: conv2d, filters: 3, kernel: 1}, {type: flatten}, {type: dense, units: 2}]"), "");
}

TEST(ShapeOverflow, ShapeSizeOverflowIsAnError) {
  const Shape s{std::int64_t(1) << 32, std::int64_t(1) << 32};
  EXPECT_THROW(s.size(), InputError);
  EXPECT_EQ((Shape{3, 4}).size(), 12);
}

}  // namespace
}  // namespace gpipe
