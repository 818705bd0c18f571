#include "gpipe/pipeline/schedule_file.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <vector>

#include "gpipe/core/error.hpp"
#include "gpipe/pipeline/schedule_check.hpp"

namespace gpipe {

namespace {

constexpr const char* kFormat = "gpipe-schedule/1";

std::string where(const std::string& source, const YAML::Node& n) {
  const auto mark = n.Mark();
  return fmt::format("{}:{}:{}", source, mark.line + 1, mark.column + 1);
}

template <class T>
T as(const YAML::Node& n, const std::string& source, const std::string& field, const std::string& expected) {
  try {
    if (!n.IsScalar()) throw YAML::Exception(n.Mark(), "not a scalar");
    return n.as<T>();
  } catch (const YAML::Exception&) {
    throw InputError(fmt::format("{}: {}: expected {}, got '{}'", where(source, n), field, expected,
                                 n.IsScalar() ? n.Scalar() : std::string("a list or map")));
  }
}

// The letters of every kind the library has (op_letter), in OpKind order:
// the kinds a schedule file may name, so a kind added to OpKind reads and
// writes without a change here. OpKind's kinds are 0, 1, ... with no gap;
// op_letter says '?' past the last.
const std::vector<char>& kind_letters() {
  static const std::vector<char> letters = [] {
    std::vector<char> out;
    for (int k = 0; op_letter(OpKind(k)) != '?'; ++k) out.push_back(op_letter(OpKind(k)));
    return out;
  }();
  return letters;
}

// "F, R, B, I, W or G": what the messages say a kind may be.
const std::string& kind_choices() {
  static const std::string text = [] {
    const auto& l = kind_letters();
    std::string out;
    for (size_t i = 0; i < l.size(); ++i) out += (i == 0 ? "" : i + 1 == l.size() ? " or " : ", ") + std::string(1, l[i]);
    return out;
  }();
  return text;
}

// The kind whose letter is `letter`; false when there is none.
bool kind_of(const std::string& letter, OpKind& kind) {
  const auto& l = kind_letters();
  for (size_t k = 0; k < l.size(); ++k)
    if (letter.size() == 1 && letter[0] == l[k]) {
      kind = OpKind(k);
      return true;
    }
  return false;
}

}  // namespace

void write_schedule(std::ostream& out, const Schedule& s, const std::string& name) {
  out << "# gpipe schedule (docs/file-formats.md, \"Schedule files\"): ops as [rank, stage, kind, micro-batch],\n"
      << "# kind F forward, R recompute, B backward, I input-gradient half, W weight-gradient half, G whole-batch W;"
      << " a grouped W [rank, stage, W, first micro-batch, count]\n";
  out << "format: " << kFormat << "\n";
  // The name through yaml-cpp's emitter: quoted where YAML needs it (a
  // tuned schedule's "tuned: ..." holds ": ").
  YAML::Emitter quoted;
  quoted << (name.empty() ? std::string("unnamed") : name);
  out << "name: " << quoted.c_str() << "\n";
  out << fmt::format("cells: {}\nstages: {}\nmicro_batches: {}\n", s.cells, s.stages, s.micro_batches);
  out << "rank_of_stage: [" << fmt::format("{}", fmt::join(s.rank_of_stage, ", ")) << "]\n";
  out << "rematerialized: [";
  for (size_t m = 0; m < s.rematerialized.size(); ++m) out << (m ? ", " : "") << (s.rematerialized[m] ? "true" : "false");
  out << "]\nops:\n";
  for (size_t r = 0; r < s.ops.size(); ++r)
    for (const Op& op : s.ops[r])
      out << (op.count == 1 ? fmt::format("  - [{}, {}, {}, {}]\n", r, op.stage, op_letter(op.kind), op.micro_batch)
                            : fmt::format("  - [{}, {}, {}, {}, {}]\n", r, op.stage, op_letter(op.kind),
                                          op.micro_batch, op.count));
}

Schedule parse_schedule_file(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}:{}:{}: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (!root.IsMap()) throw InputError(fmt::format("{}: expected a schedule file (a map with format: {})", source, kFormat));
  const std::set<std::string> known{"format", "name", "cells", "stages", "micro_batches", "rank_of_stage",
                                    "rematerialized", "ops"};
  std::map<std::string, YAML::Node> seen;
  for (const auto& kv : root) {
    const auto key = kv.first.as<std::string>();
    const auto first = seen.find(key);
    if (first != seen.end())  // yaml-cpp keeps the first silently
      throw InputError(fmt::format("{}: {}: duplicate key (first given at {}; a key may appear once)",
                                   where(source, kv.first), key, where(source, first->second)));
    seen.emplace(key, kv.first);
    if (!known.count(key))
      throw InputError(fmt::format("{}: unknown key '{}' (expected format, name, cells, stages, micro_batches, "
                                   "rank_of_stage, rematerialized, ops)",
                                   where(source, kv.first), key));
  }
  const auto required = [&](const std::string& key) {
    const YAML::Node n = root[key];
    if (!n) throw InputError(fmt::format("{}: missing key '{}'", source, key));
    return n;
  };
  const YAML::Node format = required("format");
  if (as<std::string>(format, source, "format", kFormat) != kFormat)
    throw InputError(fmt::format("{}: format: expected {}, got '{}'", where(source, format), kFormat, format.Scalar()));
  Schedule s;
  s.cells = as<int>(required("cells"), source, "cells", "an integer");
  s.stages = as<int>(required("stages"), source, "stages", "an integer");
  s.micro_batches = as<int>(required("micro_batches"), source, "micro_batches", "an integer");
  const auto list = [&](const std::string& key) {
    const YAML::Node n = required(key);
    if (!n.IsSequence()) throw InputError(fmt::format("{}: {}: expected a list", where(source, n), key));
    return n;
  };
  const YAML::Node map = list("rank_of_stage");
  for (size_t i = 0; i < map.size(); ++i)
    s.rank_of_stage.push_back(as<int>(map[i], source, fmt::format("rank_of_stage[{}]", i), "a rank (integer)"));
  const YAML::Node remat = list("rematerialized");
  for (size_t i = 0; i < remat.size(); ++i)
    s.rematerialized.push_back(as<bool>(remat[i], source, fmt::format("rematerialized[{}]", i), "true or false"));
  if (s.cells < 1 || s.cells > (1 << 20))
    throw InputError(fmt::format("{}: cells: expected 1..{}, got {}", where(source, root["cells"]), 1 << 20, s.cells));
  s.ops.resize(size_t(s.cells));
  const YAML::Node ops = list("ops");
  for (size_t i = 0; i < ops.size(); ++i) {
    const YAML::Node op = ops[i];
    const std::string field = fmt::format("ops[{}]", i);
    if (!op.IsSequence() || (op.size() != 4 && op.size() != 5))
      throw InputError(fmt::format("{}: {}: expected [rank, stage, kind, micro-batch] or, a grouped W, [rank, "
                                   "stage, W, first micro-batch, count]",
                                   where(source, op), field));
    const int rank = as<int>(op[0], source, field + " rank", "an integer");
    const int stage = as<int>(op[1], source, field + " stage", "an integer");
    const auto letter = as<std::string>(op[2], source, field + " kind", kind_choices());
    const int m = as<int>(op[3], source, field + " micro-batch", "an integer");
    const int count = op.size() == 5 ? as<int>(op[4], source, field + " count", "an integer") : 1;
    OpKind kind = OpKind::Forward;
    if (!kind_of(letter, kind))
      throw InputError(
          fmt::format("{}: {} kind: expected {}, got '{}'", where(source, op[2]), field, kind_choices(), letter));
    if (rank < 0 || rank >= s.cells)
      throw InputError(fmt::format("{}: {} rank: {} outside 0..{}", where(source, op[0]), field, rank, s.cells - 1));
    if (op.size() == 5 && (kind != OpKind::BackwardWeights || count < 1))
      throw InputError(fmt::format("{}: {} count: a count (micro-batches covered) needs kind W and at least 1, got "
                                   "{} with count {}",
                                   where(source, op[4]), field, letter, count));
    s.ops[size_t(rank)].push_back({kind, m, stage, count});
  }
  check_schedule(s, source);
  return s;
}

Schedule load_schedule(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open schedule file (missing or unreadable)", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_schedule_file(text.str(), path);
}

Schedule deck_schedule(const Deck& deck, int cells) {
  const int M = deck.training.micro_batches;
  if (deck.pipeline.schedule_file.empty()) {
    Schedule s = make_schedule(deck.pipeline.schedule, cells, M, deck.pipeline.remat, deck.pipeline.chunks,
                               deck.pipeline.w_group);
    check_schedule(s, "pipeline.schedule " + to_string(deck.pipeline.schedule));
    return s;
  }
  const std::string& path = deck.pipeline.schedule_file;
  if (deck.pipeline.w_group != 1)
    throw InputError(fmt::format("{}: pipeline.w_group: {} does not apply to a schedule file (write its grouped W ops "
                                 "into the file, e.g. with gpipe-plan --set pipeline.w_group={} --print)",
                                 path, deck.pipeline.w_group, deck.pipeline.w_group));
  if (deck.pipeline.chunks != 1)  // the file's stages and stage map are the layout: chunks would be ignored
    throw InputError(fmt::format("{}: pipeline.chunks: {} does not apply to a schedule file (its stages and "
                                 "rank_of_stage are the layout; write them with gpipe-plan --schedule "
                                 "interleaved_1f1b --set pipeline.chunks={} --print)",
                                 path, deck.pipeline.chunks, deck.pipeline.chunks));
  Schedule s = load_schedule(path);
  if (s.cells != cells || s.micro_batches != M)
    throw InputError(fmt::format("{}: pipeline.schedule_file: the schedule is for {} ranks and {} micro-batches, "
                                 "the run has K = {} and training.micro_batches = {}",
                                 path, s.cells, s.micro_batches, cells, M));
  bool backward = false;
  for (const auto& ops : s.ops)
    for (const Op& op : ops) backward = backward || op.kind != OpKind::Forward && op.kind != OpKind::Recompute;
  if (!backward)  // check_schedule accepts it (a forward-only schedule); training with it would train nothing
    throw InputError(fmt::format("{}: pipeline.schedule_file: the schedule has no backward op (F only: it would train "
                                 "nothing); training needs B, or I and W, of every stage and micro-batch",
                                 path));
  return s;
}

}  // namespace gpipe
