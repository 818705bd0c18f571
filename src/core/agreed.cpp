#include "gpipe/core/agreed.hpp"

#include <stdexcept>

#include "gpipe/core/error.hpp"

namespace gpipe {

bool any_rank(bool local, MPI_Comm comm) {
  int mine = local ? 1 : 0, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_LOR, comm);
  return any != 0;
}

Agreement agree(int kind, const std::string& message, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // The lowest failing rank (size: none): one Allreduce on the success path.
  int mine = kind != 0 ? rank : size, first = size;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  Agreement a;
  if (first == size) return a;
  a.failed = true;
  a.first_rank = first;
  int header[2] = {kind, int(message.size())};
  MPI_Bcast(header, 2, MPI_INT, first, comm);
  a.kind = header[0];
  a.message = rank == first ? message : std::string(std::size_t(header[1]), '\0');
  MPI_Bcast(a.message.data(), header[1], MPI_CHAR, first, comm);
  return a;
}

int error_kind(const std::exception& e) {
  // Agreed errors keep their kind when agreed again.
  if (dynamic_cast<const InputError*>(&e)) return 1;
  if (dynamic_cast<const PipelineError*>(&e)) return 2;
  return 3;
}

void throw_agreed(const Agreement& a) {
  if (!a.failed) return;
  if (a.kind == 1) throw AgreedError<InputError>(a.message);
  if (a.kind == 2) throw AgreedError<PipelineError>(a.message);
  throw AgreedError<std::runtime_error>(a.message);
}

}  // namespace gpipe
