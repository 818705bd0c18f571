#pragma once
// Counter-based random numbers: a value is a pure function of its key, so a
// recomputed forward pass (re-materialization) or a different partition
// reproduces it exactly. No generator state is advanced.

#include <Kokkos_Core.hpp>
#include <cstdint>

namespace gpipe::rng {

/// SplitMix64 finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mix.
KOKKOS_INLINE_FUNCTION std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Hash of a key tuple (a, b, c, d); each word is mixed in turn.
KOKKOS_INLINE_FUNCTION std::uint64_t hash(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0,
                                          std::uint64_t d = 0) {
  std::uint64_t h = mix64(a);
  h = mix64(h ^ b);
  h = mix64(h ^ c);
  return mix64(h ^ d);
}

/// Uniform double in [0, 1) from the top 53 bits of a hash.
KOKKOS_INLINE_FUNCTION double uniform01(std::uint64_t h) {
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

/// Stream identifiers, so that different uses of the same seed never collide.
enum Stream : std::uint64_t {
  kInit = 1,     ///< parameter initialization: (seed, kInit, layer, element)
  kDropout = 2,  ///< dropout masks: (seed, kDropout, step, layer), (sample, column)
  kShuffle = 3,  ///< data order: (seed, kShuffle, epoch, i)
};

}  // namespace gpipe::rng
