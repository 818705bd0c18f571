#include "gpipe/optim/clip.hpp"
#include "gpipe/core/precision.hpp"

#include <cmath>

#include "gpipe/core/fixed_sum.hpp"
#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

template <class T>
std::vector<double> segment_squared_norms(const ExecSpace& space, ConstVector<T> values,
                                          const std::vector<std::int64_t>& offsets) {
  const std::int64_t segments = std::int64_t(offsets.size()) - 1;
  std::vector<double> out(size_t(std::max<std::int64_t>(segments, 0)), 0.0);
  if (segments <= 0) return out;
  Kokkos::View<std::int64_t*, MemSpace> bounds("gpipe::clip::bounds", offsets.size());
  auto bounds_host = Kokkos::create_mirror_view(bounds);
  for (size_t i = 0; i < offsets.size(); ++i) bounds_host(i) = offsets[i];
  Kokkos::deep_copy(space, bounds, bounds_host);
  Kokkos::View<double*, MemSpace> sums("gpipe::clip::sums", size_t(segments));
  RowPolicy policy(space, segments, Kokkos::AUTO);
  policy.set_scratch_size(0, Kokkos::PerTeam(sum_lanes_bytes<double>()));
  Kokkos::parallel_for(
      "gpipe::clip::segment_squared_norms", policy, KOKKOS_LAMBDA(const RowMember& team) {
        const std::int64_t s = team.league_rank(), begin = bounds(s), count = bounds(s + 1) - bounds(s);
        const SumLanes<double> lanes(team.team_scratch(0), kSumLanes);
        const double sum = team_sum<double>(team, lanes, count, [&](const std::int64_t j) {
          const double v = double(values(begin + j));
          return v * v;
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { sums(s) = sum; });
      });
  auto host = Kokkos::create_mirror_view(sums);
  Kokkos::deep_copy(space, host, sums);
  compat::fence(space, "gpipe::clip::segment_squared_norms");
  for (std::int64_t s = 0; s < segments; ++s) out[size_t(s)] = host(s);
  return out;
}

double global_norm(const std::vector<double>& layer_squares, MPI_Comm pipeline) {
  int cells = 1;
  MPI_Comm_size(pipeline, &cells);
  const int mine = int(layer_squares.size());
  std::vector<int> counts(static_cast<size_t>(cells)), displs(static_cast<size_t>(cells), 0);
  MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, pipeline);
  for (int k = 1; k < cells; ++k) displs[size_t(k)] = displs[size_t(k) - 1] + counts[size_t(k) - 1];
  std::vector<double> all(size_t(displs.back() + counts.back()));
  MPI_Allgatherv(layer_squares.data(), mine, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE,
                 pipeline);
  double sum = 0;
  for (double v : all) sum += v;  // global layer order
  return std::sqrt(sum);
}

double clip_factor(double norm, double clip) {
  if (!(clip > 0) || !std::isfinite(norm) || norm <= clip) return 1.0;
  return clip / norm;
}

template <class T>
void scale_in_place(const ExecSpace& space, Vector<T> values, T factor) {
  Kokkos::parallel_for(
      "gpipe::clip::scale", Kokkos::RangePolicy<ExecSpace>(space, 0, values.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) { values(i) *= factor; });
}

#define GPIPE_INSTANTIATE(T) \
  template std::vector<double> segment_squared_norms<T>(const ExecSpace&, ConstVector<T>, const std::vector<std::int64_t>&); \
  template void scale_in_place<T>(const ExecSpace&, Vector<T>, T);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe
