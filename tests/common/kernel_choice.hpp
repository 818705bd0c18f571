#pragma once
// The choice that forces one implementation of the kernel seam, for tests
// that run every implementation a build has (kernels::available()):
// portable -> Choice::portable, onednn -> Choice::onednn, cublas ->
// Choice::cublas, cudnn -> Choice::cudnn. With it in force every primitive
// that the implementation has runs it, the others portable. (Mapping every
// non-portable implementation to onednn, as the tests once did, ran a CUDA
// build's cuBLAS and cuDNN rows as portable.)

#include "gpipe/kernels/backend.hpp"

namespace gpipe::test {

inline kernels::Choice forcing(kernels::Implementation implementation) {
  switch (implementation) {
    case kernels::Implementation::portable: return kernels::Choice::portable;
    case kernels::Implementation::onednn: return kernels::Choice::onednn;
    case kernels::Implementation::cublas: return kernels::Choice::cublas;
    case kernels::Implementation::cudnn: return kernels::Choice::cudnn;
  }
  return kernels::Choice::portable;
}

}  // namespace gpipe::test
