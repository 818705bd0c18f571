// The input deck: a valid deck, and each malformed-deck case with its exact error.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "../common/deck_error.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/layers/dense.hpp"
#include "gpipe/layers/dropout.hpp"
#include "gpipe/parallel/grid.hpp"

namespace gpipe {
namespace {

const char* kDeck = R"(seed: 3
model:
  input: 4
  layers:
    - {type: dense, units: 8, init: glorot}
    - {type: gelu}
    - {type: dropout, rate: 0.25}
    - {type: layer_norm}
    - {type: dense, units: 3}
data:
  train_images: ti
  train_labels: tl
  test_images: si
  test_labels: sl
training:
  epochs: 2
  batch_size: 16
  micro_batches: 4
optimizer: {type: sgd, lr: 0.1}
pipeline: {balance: [2, 3], remat: except_last}
)";

std::string error_of(const std::string& text, const std::vector<std::string>& sets = {}) {
  return test::deck_text_error(text, sets);
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(Deck, ParsesEverySection) {
  const Deck d = parse_deck(kDeck, "deck.yaml");
  EXPECT_EQ(d.seed, 3u);
  EXPECT_EQ(d.precision, "float");
  EXPECT_EQ(d.model.input_features, 4);
  ASSERT_EQ(d.model.layers.size(), 5u);
  EXPECT_EQ(d.model.layers[0].as<DenseConfig>().init, Init::Glorot);
  EXPECT_EQ(d.model.layers[2].as<DropoutConfig>().rate, 0.25);
  EXPECT_EQ(d.model.classes(), 3);
  EXPECT_EQ(d.data.train_labels, "tl");
  EXPECT_EQ(d.training.micro_batches, 4);
  EXPECT_EQ(d.optimizer.type, "sgd");
  EXPECT_EQ(d.pipeline.balance, "explicit");
  EXPECT_EQ(d.pipeline.counts, (std::vector<int>{2, 3}));
  EXPECT_EQ(d.pipeline.remat, Remat::ExceptLast);
  EXPECT_EQ(d.pipeline.schedule, ScheduleKind::FillDrain);  // the default
}

TEST(Deck, SetOverridesValues) {
  const Deck d = parse_deck(kDeck, "deck.yaml",
                            {"training.epochs=5", "optimizer.lr=0.5", "pipeline.balance=flops",
                             "precision=double"});
  EXPECT_EQ(d.training.epochs, 5);
  EXPECT_EQ(d.optimizer.lr, 0.5);
  EXPECT_EQ(d.pipeline.balance, "flops");
  EXPECT_EQ(d.precision, "double");
}

TEST(DeckErrors, UnknownLayerType) {
  EXPECT_EQ(error_of(replace(kDeck, "{type: gelu}", "{type: conv7d}")),
            "deck.yaml:6:7 (model.layers[1]): unknown layer type 'conv7d' (expected one of: "
            "avgpool1d, avgpool2d, batchnorm2d, conv1d, conv2d, dense, dropout, flatten, gelu, "
            "global_avgpool, layer_norm, lm_head, maxpool1d, maxpool2d, patch_embed, pos_embed, relu, synthetic, tanh, "
            "token_embedding, token_mean, "
            "transformer_block)");
}

TEST(DeckShapes, InputShapeListAndShapePass) {
  const Deck d = parse_deck(
      replace(replace(kDeck, "input: 4", "input: [1, 2, 2]"), "  layers:\n", "  layers:\n    - {type: flatten}\n"),
      "deck.yaml");
  EXPECT_EQ(d.model.input, (Shape{1, 2, 2}));
  EXPECT_EQ(d.model.input_features, 4);
  const auto shapes = model_shapes(parse_deck(kDeck, "deck.yaml").model);
  ASSERT_EQ(shapes.size(), 5u);
  EXPECT_EQ(shapes[0].input, Shape{4});
  EXPECT_EQ(shapes[0].output, Shape{8});
  EXPECT_EQ(shapes[0].parameter_count(), 4 * 8 + 8);
  EXPECT_EQ(shapes[3].type(), "layer_norm");
  EXPECT_EQ(shapes[3].saved.elements(10), 20);  // (mean, 1/std) per sample
  EXPECT_EQ(shapes[4].output, Shape{3});
  EXPECT_EQ(shapes[4].flops(2, false), 4.0 * 2 * 8 * 3 + 2.0 * 2 * 3);
}

TEST(DeckShapes, MismatchNamesLayerTypeAndShapes) {
  // A Dense layer reads flat features; an image needs a flatten first.
  EXPECT_EQ(error_of(replace(replace(kDeck, "input: 4", "input: [1, 2, 2]"), "{type: dense, units: 8, init: glorot}",
                             "{type: layer_norm}")),
            "deck.yaml:5:7 (model.layers[0]): layer 0 (layer_norm) cannot take input shape [1, 2, 2]: "
            "expected (features) or (tokens, width)");
  EXPECT_EQ(error_of(replace(kDeck, "input: 4", "input: [2, 2]")),
            "deck.yaml:5:7 (model.layers[0]): layer 0 (dense) cannot take input shape [2, 2]: "
            "expected (features); add {type: flatten} before it");
  EXPECT_EQ(error_of(replace(kDeck, "input: 4", "input: [1, 0, 28]")),
            "deck.yaml:3:14: model.input: expected a positive number of features or a list of "
            "positive sizes such as [1, 28, 28], got '0'");
  EXPECT_EQ(error_of(replace(kDeck, "input: 4", "input: -4")),
            "deck.yaml:3:10: model.input: expected a positive integer, got -4");
}

TEST(DeckErrors, LayerKeys) {
  EXPECT_EQ(error_of(replace(kDeck, "rate: 0.25", "rate: 1.5")),
            "deck.yaml:7:29: model.layers[2].rate: expected a number in [0, 1), got 1.5");
  EXPECT_EQ(error_of(replace(kDeck, "rate: 0.25", "units: 2")),
            "deck.yaml:7:23: unknown key 'units' in model.layers[2] (expected one of: type, rate)");
  EXPECT_EQ(error_of(replace(kDeck, "init: glorot", "init: lecun")),
            "deck.yaml:5:37: model.layers[0].init: unknown initialization 'lecun' (expected he or "
            "glorot)");
  EXPECT_EQ(error_of(replace(kDeck, "{type: gelu}", "{kind: gelu}")),
            "deck.yaml:6:7: missing required field 'model.layers[1].type' (a layer type)");
}

TEST(DeckErrors, InconsistentSizes) {
  EXPECT_EQ(error_of(replace(kDeck, "units: 3}", "units: 0}")),
            "deck.yaml:9:28: model.layers[4].units: expected a positive integer, got 0");
  EXPECT_EQ(error_of(replace(kDeck, "units: 3}", "units: 1}")),
            "model.layers: the last layer must output at least 2 class logits, got 1");
  EXPECT_EQ(error_of(replace(kDeck, "micro_batches: 4", "micro_batches: 17")),
            "deck.yaml:18:18: training.micro_batches: 17 micro-batches cannot split a batch of 16 "
            "samples (expected an integer in [1, training.batch_size])");
}

TEST(DeckErrors, NegativeBatch) {
  EXPECT_EQ(error_of(replace(kDeck, "batch_size: 16", "batch_size: -16")),
            "deck.yaml:17:15: training.batch_size: expected an integer in [1, 2^31 - 1], got -16");
}

TEST(DeckErrors, MissingField) {
  EXPECT_EQ(error_of(replace(kDeck, "  epochs: 2\n", "")),
            "deck.yaml:16:3: missing required field 'training.epochs' (an integer in [1, 2^31 - 1])");
  EXPECT_EQ(error_of(replace(kDeck, "  test_labels: sl\n", "")),
            "deck.yaml:11:3: missing required field 'data.test_labels' (a non-empty path)");
}

TEST(DeckErrors, MissingSection) {
  EXPECT_EQ(error_of(replace(kDeck, "training:", "trainin:")),
            "deck.yaml:15:1: unknown key 'trainin' in the deck (expected one of: seed, precision, kernels, "
            "model, data, training, optimizer, pipeline, parallel, checkpoint, trace)");
}

TEST(Deck, ParallelGrid) {
  const Deck d = parse_deck(kDeck, "deck.yaml");
  EXPECT_EQ(d.parallel.cells, 0);  // all ranks: one pipeline, D = 1
  EXPECT_EQ(d.parallel.placement, "replica");
  EXPECT_FALSE(d.parallel.deterministic_reduction);
  EXPECT_EQ(d.parallel.bucket_kib, 256);
  const Deck set = parse_deck(kDeck, "deck.yaml",
                              {"parallel.cells=2", "parallel.placement=pipeline",
                               "parallel.deterministic_reduction=true", "parallel.bucket_kib=8"});
  EXPECT_EQ(set.parallel.cells, 2);
  EXPECT_EQ(set.parallel.placement, "pipeline");
  EXPECT_TRUE(set.parallel.deterministic_reduction);
  EXPECT_EQ(set.parallel.bucket_kib, 8);
  EXPECT_EQ(error_of(kDeck, {"parallel.placement=diagonal"}),
            "deck.yaml (--set): parallel.placement: expected replica or pipeline, got 'diagonal'");
  EXPECT_EQ(error_of(kDeck, {"parallel.cells=-1"}),
            "deck.yaml (--set): parallel.cells: expected an integer in [0, 2^31 - 1], got -1");
  EXPECT_EQ(error_of(kDeck, {"parallel.bucket_kib=0"}),
            "deck.yaml (--set): parallel.bucket_kib: expected an integer in [1, 2^31 - 1], got 0");
}

TEST(DeckErrors, WrongType) {
  EXPECT_EQ(error_of(replace(kDeck, "epochs: 2", "epochs: two")),
            "deck.yaml:16:11: training.epochs: expected an integer in [1, 2^31 - 1], got 'two'");
}

TEST(DeckErrors, YamlSyntax) {
  EXPECT_EQ(error_of(replace(kDeck, "{type: gelu}", "{type: gelu")),
            "deck.yaml:8:5: YAML syntax error: illegal block entry");
}

TEST(DeckErrors, UnknownKeyInSection) {
  EXPECT_EQ(error_of(replace(kDeck, "lr: 0.1", "learning_rate: 0.1")),
            "deck.yaml:19:24: unknown key 'learning_rate' in optimizer (expected one of: type, lr, "
            "momentum, beta1, beta2, eps, weight_decay, schedule, warmup_steps, clip_norm)");
}

TEST(DeckErrors, UnknownSetKey) {
  const std::string e = error_of(kDeck, {"training.epoch=3"});
  EXPECT_EQ(e.rfind("unknown --set key 'training.epoch' (known keys: ", 0), 0u) << e;
  EXPECT_NE(e.find("training.epochs"), std::string::npos);
  EXPECT_EQ(error_of(kDeck, {"training.epochs"}),
            "--set 'training.epochs': expected key=value, e.g. --set optimizer.lr=0.01");
  EXPECT_EQ(error_of(kDeck, {"training.epochs=0"}),
            "deck.yaml (--set): training.epochs: expected an integer in [1, 2^31 - 1], got 0");
}

TEST(DeckErrors, BadRemat) {
  EXPECT_EQ(error_of(replace(kDeck, "remat: except_last", "remat: sometimes")),
            "deck.yaml:20:36: pipeline.remat: expected never, always or except_last, got "
            "'sometimes'");
}

// The issue's cases, and their siblings: every key has a domain checked at
// parse time, with the file, line and allowed range in the message.
TEST(DeckDomains, DuplicateKeys) {
  EXPECT_EQ(error_of(replace(kDeck, "optimizer: {type: sgd, lr: 0.1}",
                             "optimizer:\n  type: sgd\n  lr: 0.1\n  lr: 5.0")),
            "deck.yaml:22:3: optimizer.lr: duplicate key (first given at deck.yaml:21:3; a key may "
            "appear once)");
  EXPECT_EQ(error_of(replace(kDeck, "seed: 3", "seed: 3\nseed: 4")),
            "deck.yaml:2:1: seed: duplicate key (first given at deck.yaml:1:1; a key may appear once)");
  EXPECT_EQ(error_of(replace(kDeck, "{type: gelu}", "{type: gelu, type: relu}")),
            "deck.yaml:6:20: model.layers[1].type: duplicate key (first given at deck.yaml:6:8; a "
            "key may appear once)");
}

TEST(DeckDomains, RangesFinitenessAndEmptyValues) {
  EXPECT_EQ(error_of(kDeck, {"data.train_limit=-5"}),
            "deck.yaml (--set): data.train_limit: expected an integer >= 0, got -5");
  EXPECT_EQ(error_of(kDeck, {"optimizer.lr=.inf"}),
            "deck.yaml (--set): optimizer.lr: expected a finite number > 0, got .inf");
  EXPECT_EQ(error_of(kDeck, {"optimizer.lr=.nan"}),
            "deck.yaml (--set): optimizer.lr: expected a finite number > 0, got .nan");
  EXPECT_EQ(error_of(kDeck, {"training.progress_every=-3"}),
            "deck.yaml (--set): training.progress_every: expected an integer >= 0, got -3");
  EXPECT_EQ(error_of(kDeck, {"training.epochs="}),
            "deck.yaml (--set): training.epochs: expected an integer in [1, 2^31 - 1], got an empty value");
  EXPECT_EQ(error_of(replace(kDeck, "epochs: 2", "epochs:")),
            "deck.yaml:16:3: training.epochs: expected an integer in [1, 2^31 - 1], got an empty value");
  EXPECT_EQ(error_of(kDeck, {"optimizer.momentum=1"}),
            "deck.yaml (--set): optimizer.momentum: expected a number in [0, 1), got 1");
  EXPECT_EQ(error_of(kDeck, {"optimizer.beta2=-0.5"}),
            "deck.yaml (--set): optimizer.beta2: expected a number in [0, 1), got -0.5");
  EXPECT_EQ(error_of(kDeck, {"optimizer.weight_decay=-1e-3"}),
            "deck.yaml (--set): optimizer.weight_decay: expected a finite number >= 0, got -1e-3");
  EXPECT_EQ(error_of(kDeck, {"optimizer.eps=0"}),
            "deck.yaml (--set): optimizer.eps: expected a finite number > 0, got 0");
  EXPECT_EQ(error_of(kDeck, {"checkpoint.every_steps=-1"}),
            "deck.yaml (--set): checkpoint.every_steps: expected an integer >= 0, got -1");
  EXPECT_EQ(error_of(kDeck, {"checkpoint.keep=0"}),
            "deck.yaml (--set): checkpoint.keep: expected an integer in [1, 2^31 - 1], got 0");
  EXPECT_EQ(error_of(kDeck, {"trace.every=0"}),
            "deck.yaml (--set): trace.every: expected an integer >= 1, got 0");
  EXPECT_EQ(error_of(kDeck, {"seed=-1"}),
            "deck.yaml (--set): seed: expected an integer in [0, 2^64 - 1], got '-1'");
  EXPECT_EQ(error_of(kDeck, {"training.micro_batches=3000000000"}),
            "deck.yaml (--set): training.micro_batches: expected an integer in [1, 2^31 - 1], got "
            "'3000000000'");
  EXPECT_EQ(error_of(kDeck, {"data.train_images="}),
            "deck.yaml (--set): data.train_images: expected a non-empty path, got an empty value");
  EXPECT_EQ(error_of(kDeck, {"data.train_images=''"}),
            "deck.yaml (--set): data.train_images: expected a non-empty path, got ''");
  EXPECT_EQ(error_of(kDeck, {"training.nonfinite=warn"}),
            "deck.yaml (--set): training.nonfinite: expected abort, skip_step or ignore, got 'warn'");
  EXPECT_EQ(error_of(kDeck, {"pipeline.balance=[2, 0]"}),
            "deck.yaml (--set): pipeline.balance: expected a list of layer counts per cell, each an "
            "integer >= 1, got '0'");
  EXPECT_EQ(error_of(kDeck, {"data.format=hdf5", "data.train_file=a", "data.test_file=b",
                             "data.normalize=scale"}),
            "deck.yaml (--set): data.normalize: 'scale' (x/255) is for IDX images; expected none, "
            "standardize or standardize_per_feature for HDF5 data");
  const Deck d = parse_deck(kDeck, "deck.yaml", {"training.nonfinite=skip_step"});
  EXPECT_EQ(d.training.nonfinite, NonFinite::SkipStep);
  EXPECT_EQ(parse_deck(kDeck, "deck.yaml").training.nonfinite, NonFinite::Abort);
}

// fp16's loss-scaling keys with another precision were accepted and read by
// nothing (a deck meant for fp16 silently trained bf16 or float); and the
// initial scale's range is the one the scaler keeps (gpipe/optim/loss_scale.hpp).
TEST(DeckDomains, LossScalingKeysNeedFp16) {
  EXPECT_EQ(error_of(kDeck, {"training.loss_scale=1024"}),
            "deck.yaml (--set): training.loss_scale: dynamic loss scaling is for precision fp16 only (precision is "
            "float); remove the key or set precision: fp16");
  EXPECT_EQ(error_of(replace(kDeck, "micro_batches: 4", "micro_batches: 4\n  loss_scale_backoff: 0.25"),
                     {"precision=bf16"}),
            "deck.yaml:19:3: training.loss_scale_backoff: dynamic loss scaling is for precision fp16 only (precision "
            "is bf16); remove the key or set precision: fp16");
  EXPECT_EQ(error_of(kDeck, {"precision=double", "training.loss_scale_growth_interval=10"}),
            "deck.yaml (--set): training.loss_scale_growth_interval: dynamic loss scaling is for precision fp16 "
            "only (precision is double); remove the key or set precision: fp16");
  EXPECT_EQ(parse_deck(kDeck, "deck.yaml", {"precision=fp16", "training.loss_scale=1024"}).training.loss_scale,
            1024.0);
  EXPECT_EQ(error_of(kDeck, {"precision=fp16", "training.loss_scale=1e-30"}),
            "deck.yaml (--set): training.loss_scale: expected a number in [2^-24, 2^64], got 1e-30");
  EXPECT_EQ(error_of(kDeck, {"precision=fp16", "training.loss_scale=1e20"}),
            "deck.yaml (--set): training.loss_scale: expected a number in [2^-24, 2^64], got 1e20");
}

// Every settable key has a documented domain, and docs/input-deck.md shows it.
TEST(DeckDomains, EveryKeyDocumented) {
  std::ifstream in(GPIPE_SOURCE_DIR "/docs/input-deck.md");
  ASSERT_TRUE(in) << GPIPE_SOURCE_DIR "/docs/input-deck.md";
  std::stringstream doc;
  doc << in.rdbuf();
  for (const auto& key : settable_keys()) {
    if (key == "pipeline.balance") continue;  // a mode or a list: documented in its own row
    const std::string domain = key_domain(key);
    const std::string name = key.substr(key.find('.') + 1);
    EXPECT_NE(doc.str().find("| `" + name + "` | " + domain + " |"), std::string::npos)
        << key << ": docs/input-deck.md lacks the row | `" << name << "` | " << domain << " |";
  }
}

TEST(Deck, ScheduleKey) {
  EXPECT_EQ(parse_deck(kDeck, "deck.yaml", {"pipeline.schedule=1f1b"}).pipeline.schedule,
            ScheduleKind::OneFOneB);
  EXPECT_EQ(error_of(kDeck, {"pipeline.schedule=gpipe"}),
            "deck.yaml (--set): pipeline.schedule: expected fill_drain, 1f1b, zero_bubble, interleaved_1f1b, zb_v or "
            "dualpipe_v, got 'gpipe'");
  EXPECT_EQ(parse_deck(kDeck, "deck.yaml", {"pipeline.schedule=zero_bubble"}).pipeline.schedule,
            ScheduleKind::ZeroBubble);
  EXPECT_EQ(parse_deck(kDeck, "deck.yaml", {"pipeline.schedule=zb_v"}).pipeline.schedule, ScheduleKind::ZbV);
  EXPECT_EQ(parse_deck(kDeck, "deck.yaml", {"pipeline.schedule_file=s.yaml"}).pipeline.schedule_file, "s.yaml");
  EXPECT_EQ(parse_deck(kDeck, "deck.yaml").pipeline.schedule_file, "");
}

TEST(DeckErrors, MissingFile) {
  try {
    load_deck("/nonexistent/deck.yaml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/deck.yaml: cannot open input deck (missing or unreadable)");
  }
}


// Issue 25, class 4 and 6: every integer key's limit is stated and enforced
// at the deck boundary, so no arithmetic on it overflows later; values are
// stored as given.
TEST(DeckLimits, IntegerKeysAtTheirTypeLimits) {
  // bucket_kib x 1024 must fit 64 bits: 2^63 - 1 and 2^54 are refused.
  EXPECT_EQ(error_of(kDeck, {"parallel.bucket_kib=9223372036854775807"}),
            "deck.yaml (--set): parallel.bucket_kib: expected an integer in [1, 2^31 - 1], got "
            "9223372036854775807");
  EXPECT_EQ(error_of(kDeck, {"parallel.bucket_kib=18014398509481984"}),
            "deck.yaml (--set): parallel.bucket_kib: expected an integer in [1, 2^31 - 1], got "
            "18014398509481984");
  EXPECT_EQ(parse_deck(kDeck, "d", {"parallel.bucket_kib=2147483647"}).parallel.bucket_kib, 2147483647);
  // epochs: 2^62 (with cosine) is a range error naming the key, not a
  // missing total step count later.
  EXPECT_EQ(error_of(kDeck, {"training.epochs=4611686018427387904", "optimizer.schedule=cosine"}),
            "deck.yaml (--set): training.epochs: expected an integer in [1, 2^31 - 1], got "
            "4611686018427387904");
  // seed: the whole unsigned 64-bit range, stored as given.
  EXPECT_EQ(parse_deck(kDeck, "d", {"seed=18446744073709551615"}).seed, 18446744073709551615ull);
  EXPECT_EQ(error_of(kDeck, {"seed=18446744073709551616"}),
            "deck.yaml (--set): seed: expected an integer in [0, 2^64 - 1], got '18446744073709551616'");
  // Another instance: the input shape's product (features per sample).
  EXPECT_EQ(error_of(replace(kDeck, "input: 4", "input: [65536, 65536, 2]")),
            "deck.yaml:3:10: model.input: 65536 x 65536 x 2 values per sample, more than 2^31 - 1");
  EXPECT_EQ(error_of(replace(kDeck, "input: 4", "input: 4294967296")),
            "deck.yaml:3:10: model.input: 4294967296 features, more than 2^31 - 1");
  // And a layer's size key (every layer integer key is at most 2^31 - 1).
  const std::string units = error_of(replace(kDeck, "{type: dense, units: 3}", "{type: dense, units: 4294967296}"));
  EXPECT_EQ(units.rfind("deck.yaml:", 0), 0u) << units;
  EXPECT_NE(units.find("model.layers[4].units: expected"), std::string::npos) << units;
  EXPECT_NE(units.find("(at most 2^31 - 1), got 4294967296"), std::string::npos) << units;
}

// Issue 25, class 1: a layer whose statistics are undefined for the
// micro-batches it gets is an error before training, naming the layer, the
// micro-batch rows and how they come about.
TEST(DeckLimits, BatchNormNeedsTwoValuesPerChannelPerMicroBatch) {
  const std::string bn = "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n"
                         "training: {epochs: 1, batch_size: 32, micro_batches: 32}\n"
                         "model:\n  input: [2, 1, 1]\n  layers: [{type: batchnorm2d}, {type: flatten}, "
                         "{type: dense, units: 2}]\n";
  EXPECT_EQ(error_of(bn),
            "model.layers[0] (batchnorm2d): its batch statistics are undefined for micro-batches of 1 "
            "row (training.micro_batches = 32 of a 32-sample batch): input [2, 1, 1] gives 1 value per "
            "channel per micro-batch, and the variance needs at least 2 (the output would be the "
            "constant beta); use fewer micro-batches or a larger batch");
  EXPECT_EQ(error_of(bn, {"training.micro_batches=16"}), "no error");  // 2 rows
  // Another instance: one row of 1 x 2 pixels is 2 values: defined.
  EXPECT_EQ(error_of(replace(bn, "input: [2, 1, 1]", "input: [2, 1, 2]")), "no error");
  // And on D replicas the shard's micro-batches are what counts: 16 rows per
  // micro-batch at D = 1, 1 row at D = 16 (grid_shape, also --check).
  const Deck d = parse_deck(bn, "d", {"training.micro_batches=2", "parallel.cells=1"});
  EXPECT_NO_THROW(grid_shape(d, 1));
  try {
    grid_shape(d, 16);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "model.layers[0] (batchnorm2d): its batch statistics are undefined for micro-batches of "
              "1 row (training.micro_batches = 2 of the smallest 2-sample shard of a 32-sample batch "
              "on 16 replicas): input [2, 1, 1] gives 1 value per channel per micro-batch, and the "
              "variance needs at least 2 (the output would be the constant beta); use fewer "
              "micro-batches or a larger batch");
  }
}

}  // namespace
}  // namespace gpipe
