#pragma once
// Reductions whose rounding does not depend on the thread count, the team
// size or the backend (the bitwise invariants of docs/design.md hold at every
// OMP_NUM_THREADS and on a GPU).
//
// Kokkos' parallel_reduce combines per-thread partial results in an order
// that follows the thread count (OpenMP) or the team size (GPUs), so a
// floating-point sum changes in its last bits with the machine. Here a sum of
// `count` terms is split into kSumLanes (per backend, below) fixed strided lanes (lane l adds terms
// l, l + kSumLanes, ... in index order) and the lanes are then added in lane
// order: the same additions in the same order whatever the hardware; the
// lanes are spread over a team's threads (hierarchical parallelism: teams
// over rows or columns, lanes over a team's threads). Maxima and integer
// counts are exact in any order and need none of this.

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>

#include "gpipe/core/views.hpp"

namespace gpipe {

/// Lanes of every fixed-order sum, a constant per backend: 16 where the
/// execution space runs on the host (16 keeps a CPU team's threads busy
/// without idle lanes), 64 on a GPU (two 32-thread warps, one 64-wide AMD
/// wavefront), so a GPU team reduces over 64 threads instead of 16. Fixed per
/// backend, so every sum is bitwise the same at any thread count and team
/// size of that backend; between a host and a GPU backend sums differ in the
/// last bits.
template <class Space>
inline constexpr int sum_lanes_of = Kokkos::SpaceAccessibility<Space, Kokkos::HostSpace>::accessible ? 16 : 64;
inline constexpr int kSumLanes = sum_lanes_of<ExecSpace>;

/// Team scratch for team_sum of values of type A: one value per lane.
template <class A>
using SumLanes = Kokkos::View<A*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

/// Bytes of team scratch (level 0) that `views` SumLanes<A> need; pass to
/// TeamPolicy::set_scratch_size(0, Kokkos::PerTeam(...)).
template <class A>
inline std::size_t sum_lanes_bytes(int views = 1) {
  return std::size_t(views) * SumLanes<A>::shmem_size(kSumLanes);
}

/// sum_{j < count} term(j), added in the fixed lane order above; every
/// thread of the team returns the same value. Collective over the team (two
/// barriers); `lanes` is team scratch of kSumLanes values (sum_lanes_bytes).
template <class A, class Member, class Term>
KOKKOS_INLINE_FUNCTION A team_sum(const Member& team, const SumLanes<A>& lanes, std::int64_t count,
                                  const Term& term) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kSumLanes), [&](const int l) {
    A s = A(0);
    for (std::int64_t j = l; j < count; j += kSumLanes) s += term(j);
    lanes(l) = s;
  });
  team.team_barrier();
  A total = A(0);
  for (int l = 0; l < kSumLanes; ++l) total += lanes(l);
  team.team_barrier();  // the lanes may be written again
  return total;
}

/// max_{j < count} term(j) over values >= 0 (0 when count is 0; NaN terms
/// are skipped), on every thread of the team. Exact in any order; lanes as in
/// team_sum.
template <class A, class Member, class Term>
KOKKOS_INLINE_FUNCTION A team_max_nonnegative(const Member& team, const SumLanes<A>& lanes,
                                              std::int64_t count, const Term& term) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kSumLanes), [&](const int l) {
    A m = A(0);
    for (std::int64_t j = l; j < count; j += kSumLanes) {
      const A a = term(j);
      m = a > m ? a : m;
    }
    lanes(l) = m;
  });
  team.team_barrier();
  A top = A(0);
  for (int l = 0; l < kSumLanes; ++l) top = lanes(l) > top ? lanes(l) : top;
  team.team_barrier();
  return top;
}

/// team_sum's sum computed by one thread: the same kSumLanes lanes, each
/// added in index order, then the lanes in lane order, so the result is
/// bitwise team_sum's for the same terms. Written lane-innermost (lane l of
/// block b adds term(b * kSumLanes + l)), so a host compiler vectorizes the
/// lanes. For row kernels where a thread owns a row (host execution spaces:
/// no team machinery per row); on a GPU prefer team_sum (kSumLanes
/// accumulators per thread would spill).
template <class A, class Term>
KOKKOS_INLINE_FUNCTION A lane_sum(std::int64_t count, const Term& term) {
  A acc[kSumLanes];
  for (int l = 0; l < kSumLanes; ++l) acc[l] = A(0);
  std::int64_t j = 0;
  for (; j + kSumLanes <= count; j += kSumLanes)
    for (int l = 0; l < kSumLanes; ++l) acc[l] += term(j + l);
  for (int l = 0; j + l < count; ++l) acc[l] += term(j + l);
  A total = A(0);
  for (int l = 0; l < kSumLanes; ++l) total += acc[l];
  return total;
}

/// Two lane_sums in one pass over the terms: {lane_sum(count, first),
/// lane_sum(count, second)}, bitwise (each sum's additions in the same
/// order), for row kernels that need two sums of the same row.
template <class A, class First, class Second>
KOKKOS_INLINE_FUNCTION Kokkos::pair<A, A> lane_sum2(std::int64_t count, const First& first, const Second& second) {
  A a[kSumLanes], b[kSumLanes];
  for (int l = 0; l < kSumLanes; ++l) a[l] = b[l] = A(0);
  std::int64_t j = 0;
  for (; j + kSumLanes <= count; j += kSumLanes)
    for (int l = 0; l < kSumLanes; ++l) {
      a[l] += first(j + l);
      b[l] += second(j + l);
    }
  for (int l = 0; j + l < count; ++l) {
    a[l] += first(j + l);
    b[l] += second(j + l);
  }
  A ta = A(0), tb = A(0);
  for (int l = 0; l < kSumLanes; ++l) {
    ta += a[l];
    tb += b[l];
  }
  return {ta, tb};
}

/// team_max_nonnegative by one thread (exact in any order; NaN terms skipped).
template <class A, class Term>
KOKKOS_INLINE_FUNCTION A lane_max_nonnegative(std::int64_t count, const Term& term) {
  A top = A(0);
  for (std::int64_t j = 0; j < count; ++j) {
    const A a = term(j);
    top = a > top ? a : top;
  }
  return top;
}

/// Whether the execution space runs on the host, where a row kernel gives
/// each thread whole rows (lane_sum) instead of a team per row.
inline constexpr bool kHostRows = Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible;

/// Columns per work item of add_column_sums on the host.
inline constexpr int kColumnBlock = 16;

/// add_column_sums with one team per column (lanes over rows): the
/// implementation on GPUs, and the reference the host one is tested
/// against (bitwise). Arguments as add_column_sums.
template <class A, class Out, class Term>
void add_column_sums_by_teams(const char* label, const ExecSpace& space, std::int64_t rows, std::int64_t cols,
                              Out out, Term term, bool accumulate = true) {
  if (cols == 0 || (rows == 0 && accumulate)) return;
  RowPolicy policy(space, cols, Kokkos::AUTO);
  policy.set_scratch_size(0, Kokkos::PerTeam(sum_lanes_bytes<A>()));
  Kokkos::parallel_for(
      label, policy, KOKKOS_LAMBDA(const RowMember& team) {
        const std::int64_t j = team.league_rank();
        const SumLanes<A> lanes(team.team_scratch(0), kSumLanes);
        const A s = team_sum<A>(team, lanes, rows, [&](const std::int64_t i) { return A(term(i, j)); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          using V = typename Out::value_type;
          out(j) = (accumulate ? out(j) : V(0)) + V(s);
        });
      });
}

/// add_column_sums on a host execution space: one work item per block of
/// kColumnBlock columns walks the rows in order, row i into lane i %
/// kSumLanes, so every lane adds the same terms in the same order as
/// add_column_sums_by_teams and the lanes are then added in lane order: the
/// same bits, but each row's block is read contiguously (the team version
/// strides down a column) and the block's columns vectorize.
template <class A, class Out, class Term>
void add_column_sums_by_blocks(const char* label, const ExecSpace& space, std::int64_t rows, std::int64_t cols,
                               Out out, Term term, bool accumulate = true) {
  if (cols == 0 || (rows == 0 && accumulate)) return;
  const std::int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(space, 0, blocks), KOKKOS_LAMBDA(const std::int64_t block) {
        const std::int64_t j0 = block * kColumnBlock;
        const int width = int(cols - j0 < kColumnBlock ? cols - j0 : kColumnBlock);
        A acc[kSumLanes][kColumnBlock];
        for (int l = 0; l < kSumLanes; ++l)
          for (int c = 0; c < kColumnBlock; ++c) acc[l][c] = A(0);
        for (std::int64_t i = 0; i < rows; ++i) {
          A* lane = acc[i % kSumLanes];
          if (width == kColumnBlock)
            for (int c = 0; c < kColumnBlock; ++c) lane[c] += A(term(i, j0 + c));
          else
            for (int c = 0; c < width; ++c) lane[c] += A(term(i, j0 + c));
        }
        using V = typename Out::value_type;
        for (int c = 0; c < width; ++c) {
          A s = A(0);
          for (int l = 0; l < kSumLanes; ++l) s += acc[l][c];
          out(j0 + c) = (accumulate ? out(j0 + c) : V(0)) + V(s);
        }
      });
}

/// Adds to out(j), for each j < cols, the sum over i < rows of term(i, j),
/// in the fixed lane order (lane l adds rows l, l + kSumLanes, ... in
/// order; the lanes are added in lane order). Used for bias and
/// normalization-parameter gradients; deterministic at every thread count,
/// and the same bits on every host space (add_column_sums_by_blocks) as a
/// team per column gives (add_column_sums_by_teams, used on GPUs). `label`
/// names the kernel ("gpipe::Dense::backward_bias"). accumulate false:
/// writes the sums instead of adding them (out(j) is not read; the first
/// backward of a step, PassContext::accumulate_gradients).
template <class A, class Out, class Term>
void add_column_sums(const char* label, const ExecSpace& space, std::int64_t rows, std::int64_t cols,
                     Out out, Term term, bool accumulate = true) {
  if constexpr (kHostRows)
    add_column_sums_by_blocks<A>(label, space, rows, cols, out, term, accumulate);
  else
    add_column_sums_by_teams<A>(label, space, rows, cols, out, term, accumulate);
}

}  // namespace gpipe
