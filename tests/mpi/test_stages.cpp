// Stages and the runner across MPI ranks (ctest runs this at 1, 2, 3 and 4
// ranks): interleaved 1F1B (v chunks per rank, stage s on rank s mod K)
// bitwise equal to 1f1b on one rank, no deadlock for M = K, 2K, 3K, its
// activation bytes exactly the plan's, restart across (K, v, schedule)
// layouts bitwise; a hand-written V-shaped schedule (stages 0, 3 on rank 0,
// 1, 2 on rank 1: two local hand-offs) against one rank, gradients bitwise.

#include <gtest/gtest.h>
#include <mpi.h>

#include <unistd.h>

#include <cstdio>

#include "../common/mpi_util.hpp"
#include "../common/pipeline_run.hpp"
#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/model/shapes.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

const std::string kLayers = test::kNineLayers;
constexpr std::int64_t kInput = test::kNineLayersInput, kBatch = 24;
using test::world_rank;
using test::world_size;

using Result = test::PipelineRun;

std::string deck(int M, const std::string& schedule, int chunks, const std::string& remat = "never") {
  return test::deck_text(kLayers, kInput, kBatch, M, "double",
                         "{schedule: " + schedule + ", chunks: " + std::to_string(chunks) + ", remat: " + remat + "}");
}

Dataset data() { return test::synthetic(kBatch * 2, kInput, 3, 99); }

// Trains `steps` steps (from `restart` when not empty), writes a checkpoint
// to `save` when not empty.
Result train(const std::string& text, MPI_Comm comm, int steps = 2, const std::string& restart = "",
             const std::string& save = "") {
  return test::run_pipeline(parse_deck(text, "test-deck"), data(), kBatch, comm, steps, restart, save);
}

// Each stage's backwards run in micro-batch order 0..M-1, as 1f1b's do: the
// same gradient sums, so bitwise the same weights as 1f1b on one rank.
TEST(Stages, InterleavedBitwiseAgainstOneRankNoDeadlockExactBytes) {
  const int K = world_size();
  for (int v : {2, 3}) {
    if (K * v > 9) continue;  // nine layers
    for (int M : {K, 2 * K, 3 * K}) {
      Result ref;  // 1f1b, K = 1, same M, on rank 0 alone
      if (world_rank() == 0) ref = train(deck(M, "1f1b", 1), MPI_COMM_SELF);
      for (const char* remat : {"never", "always"}) {
        const Result r = train(deck(M, "interleaved_1f1b", v, remat), MPI_COMM_WORLD);
        EXPECT_EQ(int(r.partition.size()), K * v);
        // The bytes each rank allocates are the plan's, from the shape pass alone.
        const Deck d = parse_deck(deck(M, "interleaved_1f1b", v, remat), "test-deck");
        CellOptions options;
        options.max_batch = kBatch;
        options.micro_batches = M;
        options.remat = d.pipeline.remat;
        options.schedule = d.pipeline.schedule;
        options.chunks = v;
        Partition p;
        p.counts = r.partition;
        for (int k = 0; k < K; ++k)
          EXPECT_EQ(r.activation_bytes[size_t(k)], cell_activation_bytes(model_shapes(d.model), p, k, options, 8))
              << "rank " << k << " v=" << v << " M=" << M;
        if (world_rank() == 0) {
          EXPECT_EQ(r.params, ref.params) << "v=" << v << " M=" << M << " remat " << remat;
          EXPECT_EQ(r.eval_loss, ref.eval_loss) << "v=" << v << " M=" << M << " remat " << remat;
        }
      }
    }
  }
}

// Global-norm clipping sums the layers' squares in model order whatever the
// stage map: still bitwise 1f1b's.
TEST(Stages, InterleavedClippingBitwise) {
  const int K = world_size(), M = 2 * K;
  const auto clipped = [&](const std::string& schedule, int v) {
    return test::deck_text(kLayers, kInput, kBatch, M, "double",
                           "{schedule: " + schedule + ", chunks: " + std::to_string(v) + "}",
                           "{type: adam, lr: 0.01, clip_norm: 0.05}");
  };
  Result ref;
  if (world_rank() == 0) ref = train(clipped("1f1b", 1), MPI_COMM_SELF);
  const Result r = train(clipped("interleaved_1f1b", 2), MPI_COMM_WORLD);
  if (world_rank() == 0) {
    EXPECT_EQ(r.params, ref.params);
    EXPECT_EQ(r.eval_loss, ref.eval_loss);
  }
}

TEST(Stages, InterleavedNeedsAMultipleOfTheCells) {
  const int K = world_size();
  if (K == 1) GTEST_SKIP() << "every M is a multiple of one cell";
  try {
    train(deck(K + 1, "interleaved_1f1b", 2), MPI_COMM_WORLD);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "training.micro_batches: interleaved_1f1b with pipeline.chunks = 2 needs a "
                                     "multiple of the " + std::to_string(K) + " pipeline cells, not " +
                                         std::to_string(K + 1));
  }
  try {
    train(deck(K, "1f1b", 2), MPI_COMM_WORLD);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "pipeline.chunks: 2 chunks per rank need pipeline.schedule: interleaved_1f1b "
                                     "(pipeline.schedule 1f1b runs one stage per rank)");
  }
}

// A name no concurrent test process shares (rank 0's process id).
std::string checkpoint_name(const std::string& what) {
  long long pid = (long long)getpid();
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  return "/tmp/gpipe_test_stages_" + what + "_" + std::to_string(pid) + ".h5";
}

// Checkpoints are per layer: a run restarted in another (K, v, schedule)
// layout continues bitwise as if uninterrupted.
TEST(Stages, RestartAcrossLayoutsBitwise) {
  const int K = world_size(), M = 2 * K;
  const int v = K * 2 <= 9 ? 2 : 1;
  const Result straight = train(deck(M, "1f1b", 1), MPI_COMM_WORLD, 3);
  // Interleaved for 2 steps, then 1f1b on one rank for the third.
  const std::string a = checkpoint_name("interleaved");
  train(deck(M, "interleaved_1f1b", v), MPI_COMM_WORLD, 2, "", a);
  if (world_rank() == 0) {
    const Result resumed = train(deck(M, "1f1b", 1), MPI_COMM_SELF, 1, a);
    EXPECT_EQ(resumed.params, straight.params);
    EXPECT_EQ(resumed.eval_loss, straight.eval_loss);
  }
  // 1f1b on one rank for 2 steps, then interleaved on every rank.
  const std::string b = checkpoint_name("one_rank");
  if (world_rank() == 0) train(deck(M, "1f1b", 1), MPI_COMM_SELF, 2, "", b);
  MPI_Barrier(MPI_COMM_WORLD);
  const Result resumed = train(deck(M, "interleaved_1f1b", v), MPI_COMM_WORLD, 1, b);
  if (world_rank() == 0) {
    EXPECT_EQ(resumed.params, straight.params);
    EXPECT_EQ(resumed.eval_loss, straight.eval_loss);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    std::remove(a.c_str());
    std::remove(b.c_str());
  }
}

// A V-shaped 2-chunk schedule written by hand, as ZB-V and DualPipeV place
// their stages: stages 0 and 3 on rank 0, 1 and 2 on rank 1, so stage 1
// hands off to stage 2 (forward) and stage 2 back to stage 1 (gradients) on
// rank 1 itself, and rank 0 reads the inputs and computes the loss. Each
// stage runs its backwards in micro-batch order 0..M-1: the gradients of
// every layer equal bitwise those of 1f1b on one rank.
Schedule v_schedule(int M) {
  Schedule s;
  s.cells = 2;
  s.stages = 4;
  s.micro_batches = M;
  s.rank_of_stage = {0, 1, 1, 0};
  s.rematerialized.assign(size_t(M), false);
  s.ops.resize(2);
  const auto add = [&](int rank, OpKind kind, int stage) {
    for (int m = 0; m < M; ++m) s.ops[size_t(rank)].push_back({kind, m, stage});
  };
  add(0, OpKind::Forward, 0);
  add(1, OpKind::Forward, 1);
  add(1, OpKind::Forward, 2);
  add(0, OpKind::Forward, 3);
  add(0, OpKind::Backward, 3);
  add(1, OpKind::Backward, 2);
  add(1, OpKind::Backward, 1);
  add(0, OpKind::Backward, 0);
  return s;
}

// The first kBatch samples of data() on the device, for the Runner tests
// below (labels is kept alive here: targets refers to it).
struct FirstBatch {
  Dataset set = data();
  Matrix<double> inputs = test::to_device<double>(
      std::vector<double>(set.inputs.begin(), set.inputs.begin() + kBatch * kInput), kBatch, kInput);
  LabelVector labels = test::labels(std::vector<std::int32_t>(set.labels.begin(), set.labels.begin() + kBatch));
  Targets<double> targets{ConstLabelVector(labels)};
};

CellOptions runner_options(int M) {
  CellOptions options;
  options.max_batch = kBatch;
  options.micro_batches = M;
  return options;
}

TEST(Stages, HandWrittenVScheduleLocalHandOff) {
  if (world_size() != 2) GTEST_SKIP() << "the V schedule is written for 2 ranks";
  const int M = 3;
  const Deck d = parse_deck(deck(M, "1f1b", 1), "test-deck");
  const FirstBatch batch;
  const auto& inputs = batch.inputs;
  const auto& targets = batch.targets;
  CellOptions options = runner_options(M);
  options.schedule = ScheduleKind::OneFOneB;
  options.seed = d.seed;
  // Reference: one rank, one stage.
  Partition whole;
  whole.counts = {9};
  Runner<double> one(d.model, whole, MPI_COMM_SELF, options);
  one.zero_gradients();
  const LossSums ref = one.train_step(inputs, targets, kBatch, 0);
  const auto ref_grads = test::to_host(one.gradients());
  const auto ref_offsets = one.parameter_offsets();
  // The V: four stages of 2, 2, 2 and 3 layers.
  options.custom_schedule = v_schedule(M);
  Partition four;
  four.counts = {2, 2, 2, 3};
  Runner<double> v(d.model, four, MPI_COMM_WORLD, options);
  EXPECT_EQ(v.reads_inputs(), world_rank() == 0);
  EXPECT_EQ(v.computes_loss(), world_rank() == 0);
  EXPECT_EQ(v.global_layers(), world_rank() == 0 ? std::vector<int>({0, 1, 6, 7, 8}) : std::vector<int>({2, 3, 4, 5}));
  v.zero_gradients();
  const LossSums sums = v.train_step(inputs, targets, kBatch, 0);
  if (world_rank() == 0) EXPECT_EQ(sums.loss, ref.loss);
  const auto grads = test::to_host(v.gradients());
  const auto offsets = v.parameter_offsets();
  for (int l = 0; l < int(v.layers().size()); ++l) {
    const int g = v.global_layer(l);
    const std::vector<double> mine(grads.begin() + offsets[size_t(l)], grads.begin() + offsets[size_t(l) + 1]);
    const std::vector<double> want(ref_grads.begin() + ref_offsets[size_t(g)],
                                   ref_grads.begin() + ref_offsets[size_t(g) + 1]);
    EXPECT_EQ(mine, want) << "layer " << g;
  }
  // Forward-only on the same stage map: the evaluation loss of one rank.
  const LossSums eval = v.evaluate(inputs, targets, kBatch);
  const LossSums eval_ref = one.evaluate(inputs, targets, kBatch);
  if (world_rank() == 0) EXPECT_EQ(eval.loss, eval_ref.loss);
  // A schedule naming a stage its rank does not run: an error before traffic.
  options.custom_schedule.ops[1][0].stage = 0;
  try {
    Runner<double> bad(d.model, four, MPI_COMM_WORLD, options);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "schedule: op 0 of rank 1 (F0 of stage 0) names a stage rank 1 does not run");
  }
}


// Grouped W in place: zero_bubble with w_group M holds every micro-batch's
// kept activations and output gradients in consecutive slots of one
// allocation per layer, so each stage copies only the rows it does not keep
// itself (the received stage input of its first layer, the output gradient
// of its last) into the stacking buffers, and its gradients are bitwise
// those of one rank with the same groups.
TEST(Stages, GroupedWReadsKeptRowsInPlace) {
  const int K = world_size(), M = 2 * K;  // kBatch / M rows each, every slot full
  const Deck d = parse_deck(deck(M, "1f1b", 1), "test-deck");
  const FirstBatch batch;
  const auto& inputs = batch.inputs;
  const auto& targets = batch.targets;
  CellOptions options = runner_options(M);
  options.schedule = ScheduleKind::ZeroBubble;
  options.w_group = M;
  options.seed = d.seed;
  Partition whole;
  whole.counts = {9};
  Runner<double> one(d.model, whole, MPI_COMM_SELF, options);
  one.zero_gradients();
  one.train_step(inputs, targets, kBatch, 0);
  const auto ref_grads = test::to_host(one.gradients());
  const auto ref_offsets = one.parameter_offsets();
  Partition split;
  for (int k = 0; k < K; ++k) split.counts.push_back(9 / K + (k >= K - 9 % K ? 1 : 0));
  Runner<double> r(d.model, split, MPI_COMM_WORLD, options);
  r.zero_gradients();
  r.train_step(inputs, targets, kBatch, 0);
  // The rows each stage must copy: its first layer's received input, its last layer's output gradient.
  const auto grouped = [&](int l) {
    const auto& layer = *r.layers()[size_t(l)];
    return layer.splits_backward() && layer.whole_batch_weights();
  };
  const int count = int(r.layers().size());
  const std::int64_t want = ((world_rank() > 0 && grouped(0)) ? kBatch : 0) + (grouped(count - 1) ? kBatch : 0);
  ASSERT_EQ(r.stages().size(), 1u);
  EXPECT_EQ(r.stages()[0]->stacked_rows_copied(), want) << "rank " << world_rank();
  ASSERT_EQ(one.stages().size(), 1u);
  const auto& last = *one.layers().back();  // one rank: only the loss's gradient of the last layer
  EXPECT_EQ(one.stages()[0]->stacked_rows_copied(), last.splits_backward() && last.whole_batch_weights() ? kBatch : 0);
  const auto grads = test::to_host(r.gradients());
  const auto offsets = r.parameter_offsets();
  for (int l = 0; l < count; ++l) {
    const int g = r.global_layer(l);
    const std::vector<double> mine(grads.begin() + offsets[size_t(l)], grads.begin() + offsets[size_t(l) + 1]);
    const std::vector<double> ref(ref_grads.begin() + ref_offsets[size_t(g)], ref_grads.begin() + ref_offsets[size_t(g) + 1]);
    EXPECT_EQ(mine, ref) << "layer " << g;
  }
}

}  // namespace
}  // namespace gpipe
