#include "gpipe/train/plan.hpp"

#include <fmt/format.h>

#include <functional>
#include <limits>
#include <sstream>

#include "gpipe/core/agreed.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/precision.hpp"

#include "gpipe/pipeline/schedule_file.hpp"

#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/vendor.hpp"
#include "gpipe/model/shapes.hpp"
#include "gpipe/pipeline/cell.hpp"

namespace gpipe {

std::int64_t largest_shard(const Deck& deck, int replicas) {
  return (deck.training.batch_size + replicas - 1) / replicas;
}

std::int64_t largest_micro_batch(const Deck& deck, int replicas) {
  const int M = deck.training.micro_batches;
  return (largest_shard(deck, replicas) + M - 1) / M;
}

namespace {
// Where the S stages of a K-cell run come from ("" for one stage per cell).
std::string stages_origin(const Deck& deck, int stages, int cells) {
  if (!deck.pipeline.schedule_file.empty())
    return fmt::format("{} stages (pipeline.schedule_file {} on {} cells)", stages, deck.pipeline.schedule_file,
                       cells);
  if (stages == cells) return "";
  if (deck.pipeline.chunks > 1)
    return fmt::format("{} stages (pipeline.chunks = {} on {} cells)", stages, deck.pipeline.chunks, cells);
  return fmt::format("{} stages (pipeline.schedule {}: {} per cell on {} cells)", stages,
                     to_string(deck.pipeline.schedule), stages % cells == 0 && stages / cells == 2 ? "two" : "several",
                     cells);
}
}  // namespace

void forward_only_layout(Deck& deck) {
  auto& p = deck.pipeline;
  const bool several = !p.schedule_file.empty() || p.chunks > 1 || p.schedule == ScheduleKind::ZbV ||
                       p.schedule == ScheduleKind::DualPipeV;
  if (several && p.balance == "explicit") {
    p.balance = "params";
    p.counts.clear();
  }
  p.schedule_file.clear();
  p.schedule = ScheduleKind::FillDrain;
  p.chunks = 1;
  p.w_group = 1;
  p.memory_budget = 0;
}

std::string skipped_steps_reason(const Deck& deck) {
  const std::string nonfinite = "non-finite loss or gradients (training.nonfinite: skip_step)";
  if (!precision_policy(deck.precision).loss_scaling) return nonfinite;
  const std::string overflow = "fp16 gradient overflow (dynamic loss scaling, training.loss_scale*)";
  return deck.training.nonfinite == NonFinite::SkipStep ? overflow + " or a non-finite loss (training.nonfinite: "
                                                                     "skip_step)"
                                                        : overflow;
}

std::string w_group_note(const Deck& deck) {
  const int group = deck.pipeline.w_group, M = deck.training.micro_batches;
  if (group <= M || !deck.pipeline.schedule_file.empty()) return "";
  return fmt::format("pipeline.w_group = {} is more than training.micro_batches = {}: clamped to {} (each stage "
                     "runs one W op over the whole batch)",
                     group, M, M);
}

std::string schedule_label(const Deck& deck) {
  return deck.pipeline.schedule_file.empty() ? to_string(deck.pipeline.schedule)
                                             : "file " + deck.pipeline.schedule_file;
}

std::string remat_label(const Deck& deck) {
  return deck.pipeline.schedule_file.empty() ? to_string(deck.pipeline.remat) : "from the schedule file";
}

double analytical_bubble(const Deck& deck, int cells) {
  if (!deck.pipeline.schedule_file.empty()) return std::numeric_limits<double>::quiet_NaN();
  return bubble_fraction(deck.pipeline.schedule, cells, deck.training.micro_batches, deck.pipeline.chunks);
}

void check_stage_count(const Deck& deck, int stages, int cells) {
  const int L = int(deck.model.layers.size());
  if (stages <= L) return;
  const std::string origin = stages_origin(deck, stages, cells);
  if (origin.empty()) {
    balance_min_max(std::vector<double>(size_t(L), 1.0), stages);  // the one-stage-per-cell message
    return;
  }
  const int per_cell = cells > 0 && stages % cells == 0 ? stages / cells : 0;
  throw InputError(fmt::format("pipeline: {} but the model has only {} layers; every stage needs at least one layer{}",
                               origin, L,
                               deck.pipeline.schedule_file.empty() && per_cell > 0
                                   ? fmt::format(" (run with at most {} cells)", L / per_cell)
                                   : std::string()));
}

Partition deck_partition(const Deck& deck, int cells, const std::vector<double>& costs, int pipeline_cells) {
  const int L = int(deck.model.layers.size());
  if (pipeline_cells > 0) {
    check_stage_count(deck, cells, pipeline_cells);
    const std::string origin = stages_origin(deck, cells, pipeline_cells);
    if (deck.pipeline.balance == "explicit" && !origin.empty() && int(deck.pipeline.counts.size()) != cells)
      throw InputError(fmt::format("pipeline.balance: the list has {} entries but the pipeline has {}; give one "
                                   "layer count per stage",
                                   deck.pipeline.counts.size(), origin));
  }
  if (deck.pipeline.balance == "explicit") return explicit_partition(deck.pipeline.counts, L, cells);
  return balance_min_max(costs, cells);
}

void check_same_schedule(const Schedule& schedule, const Deck& deck, MPI_Comm comm) {
  std::ostringstream text;
  write_schedule(text, schedule, "");
  std::uint64_t mine = std::hash<std::string>{}(text.str()), root = mine;
  MPI_Bcast(&root, 1, MPI_UINT64_T, 0, comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const std::string what = deck.pipeline.schedule_file.empty()
                               ? fmt::format("pipeline.schedule {}", to_string(deck.pipeline.schedule))
                               : fmt::format("pipeline.schedule_file {}", deck.pipeline.schedule_file);
  throw_agreed(agree(mine == root ? 0 : 1,
                     fmt::format("{}: rank {} holds another schedule than rank 0 (every rank reads the file: it must "
                                 "be the same file on every rank)",
                                 what, rank),
                     comm));
}

namespace {
// The line of `text` (1-based `line`) and the top-level section it is in.
std::pair<std::string, std::string> line_of(const std::string& text, int line) {
  std::istringstream in(text);
  std::string l, section;
  for (int i = 1; std::getline(in, l); ++i) {
    if (!l.empty() && l[0] != ' ' && l[0] != '-') section = l.substr(0, l.find(':'));
    if (i == line) return {l, section};
  }
  return {"(end of the deck)", section};
}
}  // namespace

void check_same_deck(const Deck& deck, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  // Rank 0's parsed deck (after --set), then its path: two broadcasts of a
  // few KiB, once per pipeline.
  std::string text = deck.text, path = deck.path;
  for (std::string* s : {&text, &path}) {
    int n = int(s->size());
    MPI_Bcast(&n, 1, MPI_INT, 0, comm);
    s->resize(size_t(n));
    MPI_Bcast(s->data(), n, MPI_CHAR, 0, comm);
  }
  std::string message;
  if (rank != 0 && text != deck.text) {
    int line = 1;
    {
      std::istringstream a(deck.text), b(text);
      std::string la, lb;
      while (true) {
        const bool ga = bool(std::getline(a, la)), gb = bool(std::getline(b, lb));
        if (!ga || !gb || la != lb) break;
        ++line;
      }
    }
    const auto [mine, section] = line_of(deck.text, line);
    const auto theirs = line_of(text, line).first;
    message = fmt::format(
        "{}: rank {} read another deck than rank 0 ({}): first difference{}: rank {} has '{}', rank 0 has '{}' "
        "(the deck as parsed, after --set); every rank must read the same deck with the same --set options",
        deck.path, rank, path, section.empty() ? "" : " in section " + section, rank, mine, theirs);
  }
  throw_agreed(agree(message.empty() ? 0 : 1, message, comm));
}

RunPlan plan_run(const Deck& deck, int ranks) {
  RunPlan plan;
  kernels::select(kernels::parse_choice(deck.kernels, deck.path + ": kernels"));  // conv2d's saved bytes
  kernels::set_tf32(deck.pipeline.tf32);  // cuDNN's workspace sizes follow its math type
  plan.grid = grid_shape(deck, ranks);
  const int K = plan.grid.cells, D = plan.grid.replicas;
  plan.micro_batch = largest_micro_batch(deck, D);
  const auto shapes = model_shapes(deck.model);
  const std::string& balance = deck.pipeline.balance;
  plan.time_balance_approximated = balance == "time";
  plan.cost_unit = balance == "params" ? "params" : "flops";
  for (const auto& layer : shapes)
    plan.costs.push_back(plan.cost_unit == "params" ? double(layer.parameter_count())
                                                    : layer.flops(plan.micro_batch, layer.index > 0));
  // By stage: the schedule's (K x chunks, 2K for the V schedules, or a
  // schedule file's), checked (deck_schedule throws naming its first bad op).
  const Schedule schedule = deck_schedule(deck, K);
  plan.partition = deck_partition(deck, schedule.stages, plan.costs, K);
  CellOptions options;
  options.custom_schedule = schedule;
  options.max_batch = largest_shard(deck, D);
  options.micro_batches = deck.training.micro_batches;
  options.remat = deck.pipeline.remat;
  options.schedule = deck.pipeline.schedule;
  options.chunks = deck.pipeline.chunks;
  options.wire = precision_policy(deck.precision).wire;  // 16-bit storage (stores_16_bit)
  options.activation_storage16 = deck.pipeline.activation_storage16;
  const std::int64_t scalar = precision_policy(deck.precision).master_bytes();  // the cells' buffers
  for (int k = 0; k < K; ++k)
    plan.activation_bytes.push_back(cell_activation_bytes(shapes, plan.partition, k, options, scalar));
  const std::int64_t wire = precision_policy(deck.precision).wire_bytes();
  for (int k = 0; k < K && schedule.stages == K; ++k) {  // one stage per cell (several: not predicted)
    const int first = plan.partition.first_layer(k), last = first + plan.partition.counts[size_t(k)] - 1;
    std::int64_t values = 0;
    if (k + 1 < K) values += shapes[size_t(last)].output.size();  // activations forward
    if (k > 0) values += shapes[size_t(first)].input.size();     // gradients backward
    plan.boundary_bytes.push_back(options.max_batch * values * wire);
  }
  plan.memory = cell_memory(deck, plan.partition, D, K);
  return plan;
}

}  // namespace gpipe
