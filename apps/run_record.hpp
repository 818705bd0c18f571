#pragma once
// The run record of gpipe-train (summary key "run", trace attribute
// "run_record"): what ran (command line, effective deck, seed), where (hosts,
// ranks per host, Slurm job), with which libraries, when, and how loaded the
// machines were. docs/file-formats.md lists the keys.

#include <mpi.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpipe/io/deck.hpp"

namespace gpipe_train {

/// Where the ranks run and how loaded their hosts are, gathered on rank 0
/// (empty elsewhere). Collective.
struct HostSample {
  std::vector<std::string> rank_hosts;  ///< [rank] host name (MPI_Get_processor_name)
  std::map<std::string, double> load;   ///< host -> 1-minute load average (getloadavg)
  double max_load = 0;                  ///< the largest of `load`
};
HostSample sample_hosts(MPI_Comm comm);

/// The current UTC time, ISO 8601 ("2026-11-30T12:34:56Z").
std::string utc_now();

/// The record at the start of a run (rank 0): command line, effective deck
/// (after --set), seed, ranks and their hosts, SLURM_JOB_ID (null if unset),
/// versions, start time and load.
nlohmann::json start_record(const gpipe::Deck& deck, const std::vector<std::string>& command_line,
                            const HostSample& hosts, int ranks);

/// Completes `record` with the end time and the load at the end.
void finish_record(nlohmann::json& record, const HostSample& hosts);

}  // namespace gpipe_train
