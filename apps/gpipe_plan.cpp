// gpipe-plan: the performance model. Predicts a deck's training step on R
// ranks (step time, samples/s, bubble, memory per cell, communication) by
// simulating the runner's own schedule event by event, or sweeps every valid
// (D, K, M, schedule) and marks the best. Starts neither MPI nor Kokkos
// (docs/performance-model.md).

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli.hpp"
#include "gpipe/core/precision.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/runtime.hpp"
#include "gpipe/io/costs_file.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/model/cost.hpp"
#include "gpipe/model/shapes.hpp"
#include "gpipe/parallel/grid.hpp"
#include "gpipe/pipeline/micro_batch.hpp"
#include "gpipe/train/memory.hpp"
#include "gpipe/train/plan.hpp"
#include "gpipe/predict/predict.hpp"
#include "gpipe/predict/sweep.hpp"
#include "gpipe/predict/tune.hpp"
#include "gpipe/predict/trace_times.hpp"
#include "gpipe/pipeline/schedule_file.hpp"
#include "gpipe/pipeline/schedule_v.hpp"

namespace {

constexpr int kExitInputError = 2;
constexpr int kExitRuntimeError = 1;

struct Options {
  std::string deck;
  std::vector<std::string> sets;
  int ranks = 1;
  bool json = false;
  bool sweep = false;
  std::string link;
  std::optional<double> latency_us, bandwidth_gbytes, allreduce_gbytes, wait_hop_us;
  std::string gflops;
  double memory_gib = 0;
  double optimizer_gbytes = 0;
  std::string calibrate;  // write measured layer costs here (starts MPI and Kokkos)
  std::string costs;      // read measured layer costs from here
  std::string schedule;   // --schedule: replaces pipeline.schedule (and any schedule file)
  bool print = false;     // --print: write the schedule's op lists (a schedule file) to stdout
  std::string tune;       // --tune FILE: write the tuned zero-bubble schedule here
  int tune_in_flight = 0; // micro-batches of a rank's layers the tuned schedule may hold (0: K)
  std::string tune_trace; // --tune-trace: tune from a gpipe-train trace's measured op times
};

// Micro-batch rows the prediction (or, with --sweep, every configuration of
// the sweep) runs: both sizes of split_batch over the largest shard.
std::set<std::int64_t> needed_rows(const gpipe::Deck& deck, int ranks, bool sweep) {
  std::set<std::int64_t> rows;
  const auto add = [&](std::int64_t shard, std::int64_t M) {
    for (const auto& mb : gpipe::split_batch(shard, int(M))) rows.insert(mb.size);
  };
  if (!sweep) {
    const auto grid = gpipe::grid_shape(deck, ranks);
    add(gpipe::largest_shard(deck, grid.replicas), deck.training.micro_batches);
    return rows;
  }
  for (int K = 1; K <= ranks; ++K) {
    if (ranks % K != 0 || ranks / K > deck.training.batch_size) continue;
    const std::int64_t shard = gpipe::largest_shard(deck, ranks / K);
    for (std::int64_t M = 1; M <= shard; M *= 2) add(shard, M);
  }
  return rows;
}

// --calibrate: times every layer's forward, input-gradient and
// weight-gradient parts at every needed row count on this machine
// (time_layer_parts) and writes them to o.calibrate.
gpipe::CostsTable calibrate(const gpipe::Deck& deck, const std::set<std::int64_t>& rows, const Options& o) {
  gpipe::CostsTable t;
  t.deck = o.deck;
  t.precision = deck.precision;
  t.build = gpipe::build_description();
  for (const auto& layer : deck.model.layers) t.layer_types.push_back(layer.type);
  const auto L = std::int64_t(deck.model.layers.size());
  for (const std::int64_t r : rows) {
    if (!o.json) fmt::print(stderr, "gpipe-plan: timing {} layers at {} rows\n", L, r);
    for (std::int64_t l = 0; l < L; ++l) {
      const gpipe::LayerSeconds s = gpipe::with_scalar(
          deck.precision, [&](auto t) { return gpipe::time_layer_parts<decltype(t)>(deck.model, l, r); });
      t.rows.push_back({l, r, s.forward, s.backward_input, s.backward_weights});
    }
  }
  gpipe::write_costs_file(o.calibrate, t);
  return t;
}

gpipe::Network network_of(const Options& o, const gpipe::Deck& deck) {
  gpipe::Network n;
  if (!o.link.empty()) {
    n = gpipe::network_preset(o.link);
  } else if (deck.pipeline.link.enabled()) {  // the emulated link the deck runs over
    n.name = "deck";
    n.p2p = gpipe::LinkModel::from_deck(deck.pipeline.link.latency_us, deck.pipeline.link.bandwidth_gbps);
    n.allreduce = n.p2p;
  } else {
    n = gpipe::network_preset("shm");
  }
  if (o.latency_us || o.bandwidth_gbytes || o.allreduce_gbytes) n.name = "custom";
  if (o.latency_us) n.p2p.latency_s = n.allreduce.latency_s = *o.latency_us * 1e-6;
  if (o.bandwidth_gbytes) n.p2p.bytes_per_s = *o.bandwidth_gbytes * 1e9;
  if (o.bandwidth_gbytes && !o.allreduce_gbytes) n.allreduce.bytes_per_s = n.p2p.bytes_per_s;
  if (o.allreduce_gbytes) n.allreduce.bytes_per_s = *o.allreduce_gbytes * 1e9;
  return n;
}

nlohmann::json to_json(const gpipe::Prediction& p) {
  nlohmann::json j;
  j["ranks"] = p.ranks;
  j["replicas"] = p.replicas;
  j["cells_count"] = p.cells;
  j["micro_batches"] = p.micro_batches;
  j["schedule"] = p.schedule;
  j["remat"] = p.remat;
  j["network"] = p.network;
  j["batch_size"] = p.batch_size;
  j["micro_batch_rows"] = p.micro_batch_rows;
  j["step_time_s"] = p.step_time_s;
  j["samples_per_s"] = p.samples_per_s;
  j["bubble_fraction"] = p.bubble_fraction;
  j["bubble_fraction_analytical"] = p.bubble_analytical;
  j["imbalance"] = p.imbalance;
  j["pipeline_bytes"] = p.pipeline_bytes;
  j["allreduce_bytes"] = p.allreduce_bytes;
  j["comm_bytes"] = p.comm_bytes;
  j["max_memory_bytes"] = p.max_memory_bytes();
  j["cells"] = nlohmann::json::array();
  for (const auto& c : p.cells_detail)
    j["cells"].push_back({{"first_layer", c.first_layer},
                          {"layers", c.layers},
                          {"busy_s", c.busy_s},
                          {"idle_s", c.idle_s},
                          {"reduce_exposed_s", c.reduce_exposed_s},
                          {"peak_micro_batches", c.peak_micro_batches},
                          {"activation_bytes", c.activation_bytes},
                          {"parameter_bytes", c.parameter_bytes},
                          {"memory_bytes", c.memory_bytes},
                          {"memory", {{"parameters", c.memory.parameters},
                                      {"gradients", c.memory.gradients},
                                      {"layer_state", c.memory.layer_state},
                                      {"optimizer", c.memory.optimizer},
                                      {"activations", c.memory.activations},
                                      {"gradient_buffers", c.memory.gradient_buffers},
                                      {"workspaces", c.memory.workspaces},
                                      {"staging", c.memory.staging},
                                      {"reduction", c.memory.reduction},
                                      {"transient", c.memory.transient},
                                      {"weight_copy", c.memory.weight_copy},
                                      {"seam_scratch", c.memory.seam_scratch}}}});
  return j;
}

std::string mib(std::int64_t bytes) { return fmt::format("{:.2f}", double(bytes) / (1 << 20)); }

void print_prediction(const gpipe::Prediction& p, const gpipe::Network& net) {
  fmt::print("gpipe-plan: predicted (not measured) on {} ranks = {} replicas (D) x {} cells (K), "
             "N = {} in M = {} micro-batches of <= {} rows, schedule {}, re-materialization {}\n",
             p.ranks, p.replicas, p.cells, p.batch_size, p.micro_batches, p.micro_batch_rows, p.schedule, p.remat);
  fmt::print("  network {}: latency {:.3g} us, {:.3g} GB/s point-to-point, all-reduce {:.3g} GB/s\n", net.name,
             net.p2p.latency_s * 1e6, net.p2p.bytes_per_s * 1e-9, net.allreduce.bytes_per_s * 1e-9);
  fmt::print("  step time {:.6g} s, {:.1f} samples/s, bubble {:.4f} ({}), "
             "imbalance (max/mean busy) {:.3f}\n",
             p.step_time_s, p.samples_per_s, p.bubble_fraction,
             p.bubble_analytical < 0 ? std::string("a schedule file: no formula")
                                     : fmt::format("balanced-cell formula {:.4f}", p.bubble_analytical),
             p.imbalance);
  fmt::print("  communication per step: {} MiB pipeline + {} MiB all-reduce = {} MiB\n", mib(p.pipeline_bytes),
             mib(p.allreduce_bytes), mib(p.comm_bytes));
  fmt::print("  {:>4} {:>9} {:>10} {:>10} {:>10} {:>8} {:>12} {:>12} {:>12}\n", "cell", "layers", "busy s",
             "idle s", "reduce s", "in-flt", "activ. MiB", "param MiB", "memory MiB");
  for (size_t k = 0; k < p.cells_detail.size(); ++k) {
    const auto& c = p.cells_detail[k];
    fmt::print("  {:>4} {:>9} {:>10.4g} {:>10.4g} {:>10.4g} {:>8} {:>12} {:>12} {:>12}\n", k,
               fmt::format("{}-{}", c.first_layer, c.first_layer + c.layers - 1), c.busy_s, c.idle_s,
               c.reduce_exposed_s, c.peak_micro_batches, mib(c.activation_bytes), mib(c.parameter_bytes),
               mib(c.memory_bytes));
  }
}

void print_sweep(const gpipe::SweepResult& s, double memory_gib) {
  fmt::print("gpipe-plan: predicted (not measured) sweep over {} ranks, N = {}{}\n", s.ranks, s.batch_size,
             memory_gib > 0 ? fmt::format(", memory per rank <= {:g} GiB", memory_gib) : std::string());
  fmt::print("  {:>5} {:>5} {:>5} {:<12} {:>12} {:>12} {:>8} {:>12} {:>12}\n", "D", "K", "M", "schedule",
             "step s", "samples/s", "bubble", "memory MiB", "comm MiB");
  for (size_t i = 0; i < s.rows.size(); ++i) {
    const auto& p = s.rows[i].prediction;
    fmt::print("  {:>5} {:>5} {:>5} {:<12} {:>12.5g} {:>12.1f} {:>8.4f} {:>12} {:>12}{}{}\n", p.replicas, p.cells,
               p.micro_batches, p.schedule, p.step_time_s, p.samples_per_s, p.bubble_fraction,
               mib(p.max_memory_bytes()), mib(p.comm_bytes), s.rows[i].fits ? "" : "  (over memory)",
               int(i) == s.best ? "  <- best" : "");
  }
  if (s.best < 0) fmt::print("  no configuration fits in the memory limit\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Predict a deck's training step on R ranks without running it (the performance model, "
      "docs/performance-model.md): step time, samples/s, bubble, per-cell activation and parameter "
      "memory, communication volume. Simulates the runner's own schedule event by event; starts "
      "neither MPI nor Kokkos.\n\n"
      "  gpipe-plan inputs/deep_mlp.yaml --ranks 4\n"
      "  gpipe-plan inputs/deep_mlp.yaml --ranks 64 --link hdr200 --sweep --memory-GiB 16 --json",
      "gpipe-plan"};
  app.add_option("deck", o.deck, "YAML input deck")->required();
  app.add_option("--set", o.sets, "Override a deck value, KEY=VALUE (as gpipe-train); repeatable")
      ->type_name("KEY=VALUE");
  app.add_option("--ranks", o.ranks, "Number of MPI ranks R = D x K (K = parallel.cells, 0: all)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--json", o.json, "Print one JSON object on stdout instead of the table");
  app.add_flag("--sweep", o.sweep,
               "Every valid (D, K, M in powers of 2 up to the shard, schedule) on R ranks; marks the "
               "best samples/s within --memory-GiB");
  app.add_option("--memory-GiB", o.memory_gib, "With --sweep: memory per rank limit (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--link", o.link,
                 "Network preset: shm (this machine), 10GbE, hdr200 (default: the deck's pipeline.link "
                 "if set, else shm)");
  app.add_option("--latency-us", o.latency_us, "Point-to-point and all-reduce latency, microseconds")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--wait-hop-us", o.wait_hop_us,
                 "With pipeline.wait: sleep, the delay a waiting rank takes to notice a message, microseconds "
                 "(default 32.5: half a poll period on a quiet machine; perf/wake_probe.py measures it under load)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bandwidth-GBps", o.bandwidth_gbytes, "Point-to-point bandwidth, GB/s (10^9 bytes/s)")
      ->check(CLI::PositiveNumber);
  app.add_option("--allreduce-GBps", o.allreduce_gbytes,
                 "Ring all-reduce link bandwidth, GB/s (default: the preset's, or --bandwidth-GBps when given)")
      ->check(CLI::PositiveNumber);
  app.add_option("--gflops", o.gflops,
                 "GEMM rate for layers costed by FLOPs: GFLOP/s, or ROWS:GFLOPS,... against micro-batch "
                 "rows (default: this machine's measured curve)");
  app.add_option("--optimizer-GBps", o.optimizer_gbytes,
                 "Optimizer step rate, GB/s of the arrays it reads and writes (default: this machine's "
                 "measured rate: SGD 34, Adam 5)")
      ->check(CLI::PositiveNumber);
  auto* calibrate_option = app.add_option(
      "--calibrate", o.calibrate,
      "Time every layer (forward, input gradient, weight gradient) on this machine at the micro-batch "
      "rows the prediction (or --sweep) needs, save them to this HDF5 file and predict with them; "
      "starts MPI and Kokkos");
  app.add_option("--costs", o.costs, "Predict with the layer times of a --calibrate file")
      ->excludes(calibrate_option);
  app.add_option("--schedule", o.schedule,
                 "Predict (or --print) this schedule instead of the deck's: fill_drain, 1f1b, zero_bubble, "
                 "interleaved_1f1b (with --set pipeline.chunks=V), zb_v, dualpipe_v");
  app.add_flag("--print", o.print,
               "Write the schedule's op lists to stdout as a schedule file (docs/file-formats.md, "
               "\"Schedule files\"; one line per op: rank, stage, kind, micro-batch) instead of predicting");
  auto* tune_option = app.add_option(
      "--tune", o.tune,
      "Build the zero-bubble schedule with the least simulated step from the per-stage F, I, W times "
      "(synthetic keys, --costs/--calibrate measurements, or FLOPs) within --tune-in-flight, write it to "
      "this schedule file and print the candidates against ZB-H1; the deck's pipeline.w_group groups every "
      "candidate's W ops as it groups the deck's schedule (the file then holds the grouped W: run it with "
      "pipeline.w_group=1)");
  app.add_option("--tune-in-flight", o.tune_in_flight,
                 "With --tune: micro-batches of a rank's layers it may hold at once (default K: ZB-H1's and "
                 "1F1B's peak)")
      ->check(CLI::PositiveNumber)
      ->needs(tune_option);
  app.add_option("--tune-trace", o.tune_trace,
                 "With --tune: take each cell's F, I (or fused B) and W times from this gpipe-train trace "
                 "(medians of its events) instead of the cost model; one stage per cell")
      ->needs(tune_option);
  app.set_version_flag("--version", [] { return gpipe::build_description(); });
  app.allow_extras();  // --kokkos-* options, with --calibrate
  try {
    app.parse(argc, argv);
    for (const auto& extra : app.remaining())
      if (extra.rfind("--kokkos", 0) != 0) throw CLI::ExtrasError({extra});
  } catch (const CLI::ParseError& e) {
    if (app.exit(e) != 0) return kExitInputError;
    // --version with an invalid GPIPE_KERNELS: the build is printed, the status says a plan would fail
    return dynamic_cast<const CLI::CallForVersion*>(&e) ? gpipe::app::version_status("gpipe-plan", true) : 0;
  }
  std::unique_ptr<gpipe::Runtime> runtime;
  try {
    gpipe::Deck deck = gpipe::load_deck(o.deck, o.sets);
    // GPIPE_KERNELS decides conv2d's saved bytes and the costs; an invalid one fails every plan as it fails a run.
    if (const std::string env = gpipe::app::environment_error(); !env.empty()) throw gpipe::InputError(env);
    if (!o.schedule.empty()) {
      deck.pipeline.schedule = gpipe::parse_schedule(o.schedule, "--schedule");
      deck.pipeline.schedule_file.clear();
    }
    if (const std::string note = gpipe::w_group_note(deck); !note.empty() && !o.sweep)
      fmt::print(stderr, "gpipe-plan: note: {}\n", note);
    if (o.print) {
      const int cells = gpipe::grid_shape(deck, o.ranks).cells;
      const gpipe::Schedule s = gpipe::deck_schedule(deck, cells);
      gpipe::write_schedule(std::cout, s,
                            deck.pipeline.schedule_file.empty() ? gpipe::to_string(deck.pipeline.schedule)
                                                                : deck.pipeline.schedule_file);
      return 0;
    }
    gpipe::PredictOptions options;
    if (!o.calibrate.empty()) {
      const auto rows = needed_rows(deck, o.ranks, o.sweep);  // deck errors before MPI starts
      runtime = gpipe::app::start_runtime("gpipe-plan", argc, argv);
      if (!runtime) return kExitRuntimeError;
      options.costs.measured = gpipe::measured_costs(calibrate(deck, rows, o), deck, o.calibrate);
    }
    if (!o.costs.empty())
      options.costs.measured = gpipe::measured_costs(gpipe::read_costs_file(o.costs), deck, o.costs);
    options.network = network_of(o, deck);
    options.optimizer_bytes_per_s = o.optimizer_gbytes * 1e9;
    if (o.wait_hop_us) options.wait_hop_s = *o.wait_hop_us * 1e-6;
    options.costs.synthetic = gpipe::synthetic_layers(deck);
    if (!o.gflops.empty()) options.costs.rate = gpipe::RateCurve::parse(o.gflops, "--gflops");
    if (!o.tune.empty()) {
      const int K = gpipe::grid_shape(deck, o.ranks).cells;
      gpipe::TuneResult t;
      if (!o.tune_trace.empty()) {
        const gpipe::TraceTimes times = gpipe::read_trace_times(o.tune_trace);
        if (times.cells != K)
          throw gpipe::InputError(fmt::format("{}: --tune-trace: a trace of {} cells, the deck runs K = {} on {} ranks",
                                              o.tune_trace, times.cells, K, o.ranks));
        // The op times are those of the trace's micro-batch size: tuning another M would time ops of
        // other rows (N / M) with them.
        if (times.micro_batches != deck.training.micro_batches)
          throw gpipe::InputError(fmt::format("{}: --tune-trace: the trace ran M = {} micro-batches, the deck runs "
                                              "training.micro_batches = {} (its ops' times are for other micro-batch "
                                              "sizes); trace a run of the deck's M",
                                              o.tune_trace, times.micro_batches, deck.training.micro_batches));
        fmt::print("gpipe-plan: measured op times from {} (schedule {}, medians, seconds):\n", o.tune_trace,
                   times.schedule);
        for (int k = 0; k < K; ++k)
          fmt::print("  cell {}: F {:.6g}  I {:.6g}  W {:.6g}\n", k, times.forward[size_t(k)],
                     times.backward_input[size_t(k)], times.backward_weights[size_t(k)]);
        t = gpipe::tune_times(times, deck.training.micro_batches, o.tune_in_flight > 0 ? o.tune_in_flight : K,
                              options.network.p2p.latency_s, deck.pipeline.w_group);
      } else {
        t = gpipe::tune(deck, o.ranks, options, o.tune_in_flight > 0 ? o.tune_in_flight : K);
      }
      fmt::print("gpipe-plan: --tune (predicted, not measured) on {} ranks, K = {}, M = {}, at most {} "
                 "micro-batches of a rank's layers in flight\n",
                 o.ranks, K, deck.training.micro_batches, o.tune_in_flight > 0 ? o.tune_in_flight : K);
      if (const std::string note = gpipe::tune_w_group_note(deck); !note.empty()) fmt::print("  {}\n", note);
      fmt::print("  {:<48} {:>12} {:>8} {:>8} {:>10}\n", "candidate", "step s", "bubble", "fits", "vs ZB-H1");
      for (size_t i = 0; i < t.candidates.size(); ++i) {
        const auto& c = t.candidates[i];
        fmt::print("  {:<48} {:>12.6g} {:>8.4f} {:>8} {:>9.3f}x{}\n", c.name, c.step_s, c.bubble,
                   c.fits ? "yes" : "no", t.zb_h1_step_s / c.step_s, int(i) == t.best ? "  <- written" : "");
      }
      if (t.best < 0)
        throw gpipe::InputError(fmt::format(
            "--tune: no candidate fits the memory limit (at most {} micro-batches of a rank's layers, "
            "--tune-in-flight){}",
            o.tune_in_flight > 0 ? o.tune_in_flight : K,
            deck.pipeline.w_group == 1 ? ""
                                       : fmt::format("; pipeline.w_group = {} keeps each micro-batch's activations "
                                                     "until its group's W: raise --tune-in-flight",
                                                     deck.pipeline.w_group)));
      std::ofstream out(o.tune);
      if (!out) throw gpipe::InputError(fmt::format("{}: --tune: cannot write the schedule file", o.tune));
      gpipe::write_schedule(out, t.candidates[size_t(t.best)].schedule,
                            "tuned: " + t.candidates[size_t(t.best)].name);
      fmt::print("  wrote {} (run it with --set pipeline.schedule_file={}{})\n", o.tune, o.tune,
                 deck.pipeline.w_group == 1 ? "" : " --set pipeline.w_group=1: the file holds the grouped W ops");
      return 0;
    }
    if (o.sweep) {
      const auto s = gpipe::sweep(deck, o.ranks, options, std::int64_t(o.memory_gib * double(1LL << 30)));
      if (o.json) {
        nlohmann::json j;
        j["ranks"] = s.ranks;
        j["batch_size"] = s.batch_size;
        j["memory_limit_bytes"] = s.memory_limit_bytes;
        j["best"] = s.best;
        j["rows"] = nlohmann::json::array();
        for (const auto& r : s.rows) {
          auto row = to_json(r.prediction);
          row["fits"] = r.fits;
          j["rows"].push_back(row);
        }
        std::cout << j.dump(2) << "\n";
      } else {
        print_sweep(s, o.memory_gib);
      }
      return 0;
    }
    const gpipe::Prediction p = gpipe::predict(deck, o.ranks, options);
    // pipeline.memory_budget: whether every rank fits (the run would refuse otherwise).
    std::string over;
    try {
      gpipe::check_memory_budget([&] {
        std::vector<gpipe::CellMemory> m;
        for (const auto& c : p.cells_detail) m.push_back(c.memory);
        return m;
      }(), deck.pipeline.memory_budget, gpipe::grid_shape(deck, o.ranks));
    } catch (const gpipe::InputError& e) {
      over = e.what();
    }
    if (o.json) {
      auto j = to_json(p);
      j["memory_budget_bytes"] = deck.pipeline.memory_budget > 0 ? nlohmann::json(deck.pipeline.memory_budget) : nullptr;
      j["fits_memory_budget"] = over.empty();
      const double hop = options.wait_hop_s >= 0 ? options.wait_hop_s : gpipe::kWaitSleepHopS;
      j["wait_hop_us"] = deck.pipeline.wait_sleep ? nlohmann::json(hop * 1e6) : nullptr;
      std::cout << j.dump(2) << "\n";
    } else {
      print_prediction(p, options.network);
      if (deck.pipeline.wait_sleep)
        fmt::print("  pipeline.wait sleep: {:.3g} us per message for a waiting rank to notice it\n",
                   (options.wait_hop_s >= 0 ? options.wait_hop_s : gpipe::kWaitSleepHopS) * 1e6);
      if (deck.pipeline.memory_budget > 0)
        fmt::print("  pipeline.memory_budget {} per rank: {}\n", gpipe::format_bytes(deck.pipeline.memory_budget),
                   over.empty() ? "every rank fits" : over);
    }
  } catch (const gpipe::InputError& e) {
    std::cerr << "gpipe-plan: error: " << e.what() << "\n";
    return kExitInputError;
  }
  return 0;
}
