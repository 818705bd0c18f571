#pragma once
// Schedules as files: any Schedule written as YAML, one op per line
// (docs/file-formats.md, "Schedule files"), read back with yaml-cpp and
// checked (check_schedule) before any traffic; and the one entry point that
// gives the Schedule a deck trains with.

#include <iosfwd>
#include <string>

#include "gpipe/io/deck.hpp"
#include "gpipe/pipeline/schedule.hpp"

namespace gpipe {

/// Writes `schedule` in the schedule file format: the keys format
/// ("gpipe-schedule/1"), name (`name`, informative), cells, stages,
/// micro_batches, rank_of_stage, rematerialized, then `ops:`, one op a line
/// as "  - [rank, stage, kind, micro-batch]" (kind: op_letter's F, R, B, I,
/// W or G; a grouped W, Op::count > 1, as "  - [rank, stage, W, first
/// micro-batch, count]"), rank by rank, each rank's ops in execution order.
/// Not collective.
void write_schedule(std::ostream& out, const Schedule& schedule, const std::string& name);

/// Reads the schedule in `text` (`source` names it in messages) and checks
/// it. Throws InputError: "<source>:<line>:<column>: <field>: <problem>" for
/// YAML syntax, a missing or unknown key, a wrong type or format, an op that
/// is not [rank, stage, kind, micro-batch] (or [rank, stage, W, micro-batch,
/// count >= 1]) or names a rank outside 0..cells-1; then check_schedule(schedule, source)'s "<source>: rank R, op
/// I (X(m) of stage s): ..." for the first bad op.
Schedule parse_schedule_file(const std::string& text, const std::string& source);

/// parse_schedule_file of the file at `path`; throws InputError naming
/// `path` when it cannot be read.
Schedule load_schedule(const std::string& path);

/// The schedule `deck` trains with on `cells` ranks per pipeline: the file
/// pipeline.schedule_file when set (load_schedule; its cells and
/// micro_batches must be `cells` and training.micro_batches, else
/// InputError naming the file and pipeline.schedule_file; its
/// rematerialized list replaces pipeline.remat, and pipeline.chunks is not
/// used; pipeline.w_group other than 1 and a file without any backward op
/// (forward-only: it would train nothing) are InputErrors naming the file),
/// else make_schedule(pipeline.schedule, cells, training.micro_batches,
/// pipeline.remat, pipeline.chunks, pipeline.w_group). Either
/// way the result has passed check_schedule, so a runner may start traffic.
/// Not collective (every rank computes the same schedule from the same deck).
Schedule deck_schedule(const Deck& deck, int cells);

}  // namespace gpipe
