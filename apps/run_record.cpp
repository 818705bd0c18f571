#include "run_record.hpp"

#include <algorithm>
#include <cstdlib>
#include <ctime>

#include "gpipe/core/runtime.hpp"
#include "gpipe/kernels/backend.hpp"

namespace gpipe_train {

HostSample sample_hosts(MPI_Comm comm) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  double load = -1;
  if (getloadavg(&load, 1) != 1) load = -1;  // -1: unknown on this system
  std::vector<char> names(rank == 0 ? size_t(ranks) * MPI_MAX_PROCESSOR_NAME : 0);
  std::vector<double> loads(rank == 0 ? size_t(ranks) : 0);
  MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
             comm);
  MPI_Gather(&load, 1, MPI_DOUBLE, loads.data(), 1, MPI_DOUBLE, 0, comm);
  HostSample sample;
  if (rank != 0) return sample;
  for (int r = 0; r < ranks; ++r) {
    const char* host = names.data() + size_t(r) * MPI_MAX_PROCESSOR_NAME;
    sample.rank_hosts.emplace_back(host);
    if (loads[size_t(r)] >= 0) sample.load[host] = loads[size_t(r)];
  }
  for (const auto& [host, value] : sample.load) sample.max_load = std::max(sample.max_load, value);
  return sample;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

nlohmann::json start_record(const gpipe::Deck& deck, const std::vector<std::string>& command_line,
                            const HostSample& hosts, int ranks) {
  nlohmann::json r;
  r["command_line"] = command_line;
  r["deck"] = deck.path;
  r["effective_deck"] = deck.text;
  r["seed"] = deck.seed;
  r["ranks"] = ranks;
  r["rank_hosts"] = hosts.rank_hosts;
  nlohmann::json per_host = nlohmann::json::object();
  for (size_t k = 0; k < hosts.rank_hosts.size(); ++k) per_host[hosts.rank_hosts[k]].push_back(k);
  r["hosts"] = per_host;  // host -> its ranks (the layout)
  const char* job = std::getenv("SLURM_JOB_ID");
  r["slurm_job_id"] = job ? nlohmann::json(job) : nlohmann::json(nullptr);
  const gpipe::BuildInfo b = gpipe::build_info();
  r["versions"] = {{"gpipe", b.gpipe},   {"kokkos", b.kokkos},
                   {"kokkos_execution_space", b.execution_space},
                   {"mpi", b.mpi},       {"hdf5", b.hdf5},
                   {"gpu_aware_mpi", b.gpu_aware_mpi}};
  r["kernels"] = {{"built", gpipe::kernels::build_summary()},
                  {"selected", gpipe::kernels::selection_summary()}};
  r["start_time"] = utc_now();
  r["machine_load"] = {{"start", hosts.max_load}, {"start_per_host", hosts.load}};
  return r;
}

void finish_record(nlohmann::json& record, const HostSample& hosts) {
  record["end_time"] = utc_now();
  record["machine_load"]["end"] = hosts.max_load;
  record["machine_load"]["end_per_host"] = hosts.load;
}

}  // namespace gpipe_train
