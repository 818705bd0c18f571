#include "gpipe/train/restart.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gpipe/core/error.hpp"

namespace gpipe {

std::int64_t steps_in_epoch(std::int64_t samples, std::int64_t offset, std::int64_t batch_size,
                            std::int64_t min_samples) {
  const std::int64_t left = std::max<std::int64_t>(samples - offset, 0);
  return left / batch_size + (left % batch_size >= min_samples ? 1 : 0);
}

DataPosition restart_position(const CheckpointInfo& info, const std::string& path, const Deck& deck,
                              std::int64_t train_samples, std::vector<std::string>* changed_out,
                              std::string* skipped_check) {
  DataPosition p;
  p.epoch = info.epoch;
  if (skipped_check) skipped_check->clear();
  // The deck the checkpoint's run used, read as stored (parse_stored_deck:
  // an earlier version's fp16 keys with bf16, no data section). One that
  // still does not parse (a foreign or damaged deck) cannot be compared.
  Deck old;
  bool have_old = false;
  std::string unparsed;  // why not
  try {
    old = parse_stored_deck(info.deck, path + " (deck)");
    have_old = true;
  } catch (const std::exception& e) {
    unparsed = e.what();
  }
  // read_data requires train_images (idx) or train_file (hdf5, tokens): both
  // empty means the stored deck had no data section (a C API run's).
  const bool old_data = have_old && (!old.data.train_images.empty() || !old.data.train_file.empty());
  if (have_old && !old_data) unparsed = "it has no data section";
  std::vector<std::string> changed;
  if (old_data) {
    const DataSpec &a = old.data, &b = deck.data;
    auto differs = [&](const char* key, bool d) {
      if (d) changed.push_back(key);
    };
    differs("data.format", a.format != b.format);
    differs("data.train_images", a.train_images != b.train_images);
    differs("data.train_labels", a.train_labels != b.train_labels);
    differs("data.train_file", a.train_file != b.train_file);
    differs("data.inputs_dataset", a.format == "hdf5" && a.inputs_dataset != b.inputs_dataset);
    differs("data.labels_dataset", a.format == "hdf5" && a.labels_dataset != b.labels_dataset);
    differs("data.train_limit", a.train_limit != b.train_limit);
    differs("training.shuffle", old.training.shuffle != deck.training.shuffle);
    differs("seed", old.seed != deck.seed && deck.training.shuffle);
  }
  if (info.train_samples > 0 && info.train_samples != train_samples && changed.empty())
    changed.push_back("the training set (" + std::to_string(info.train_samples) + " samples, now " +
                      std::to_string(train_samples) + ")");
  if (info.batch_size > 0) {  // this version's record of the position
    p.epoch_samples = info.epoch_samples;
    p.epoch_loss_sum = info.epoch_loss_sum;
    p.loss_samples = std::max<std::int64_t>(info.epoch_loss_samples, 0);
    p.metric_moments = info.epoch_metric_moments;
    p.metric_samples = std::max<std::int64_t>(info.epoch_metric_samples, 0);
    p.skipped_steps = info.epoch_skipped_steps;
  } else {  // older files: steps of the old batch size into the epoch
    const std::int64_t N = have_old ? old.training.batch_size : deck.training.batch_size;
    const std::int64_t M = have_old ? old.training.micro_batches : deck.training.micro_batches;
    const std::int64_t per_epoch = steps_in_epoch(train_samples, 0, N, M);
    p.epoch_samples = std::min(train_samples, (info.step - info.epoch * per_epoch) * N);
    p.loss_samples = 0;
  }
  if (!old_data) {  // the keys above could not be compared
    const std::string why = fmt::format(
        "the deck stored in the checkpoint cannot be compared with this deck ({}), so whether the training set "
        "or its order changed (data.format, data.train_images, data.train_labels, data.train_file, "
        "data.inputs_dataset, data.labels_dataset, data.train_limit, training.shuffle, seed) cannot be checked",
        unparsed);
    if (p.epoch_samples > 0)
      throw InputError(fmt::format("{}: cannot resume in the middle of epoch {} ({} of its samples trained): {}; "
                                   "restart from an end-of-epoch checkpoint",
                                   path, p.epoch + 1, p.epoch_samples, why));
    if (skipped_check)
      *skipped_check = fmt::format("{}: {}: that check was skipped (resuming at the start of epoch {})", path, why,
                                   p.epoch + 1);
  }
  if (p.epoch_samples > 0 && !changed.empty())
    throw InputError(fmt::format(
        "{}: cannot resume in the middle of epoch {} ({} of its samples trained): the deck changed "
        "{} since the checkpoint was written, so the position in the epoch's data no longer "
        "applies; restore the previous values or restart from an end-of-epoch checkpoint",
        path, p.epoch + 1, p.epoch_samples, fmt::join(changed, ", ")));
  if (changed_out) *changed_out = changed;
  return p;
}

}  // namespace gpipe
