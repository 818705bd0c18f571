// Known-good fixture for scripts/check_device_lambdas.py (never compiled):
// lambdas nvcc accepts, in shapes close to the rejected ones; nothing here
// may be reported.
#include <Kokkos_Core.hpp>

namespace {
template <class T>
void free_kernel(int n) {
  Kokkos::parallel_for(n, KOKKOS_LAMBDA(int i) { (void)i; });
}
}  // namespace

template <class T, class U = int>
class Layer final : public Base<T> {
 private:
  int helper(int n) const { return n; }  // private, no lambda
  // private: KOKKOS_LAMBDA in a comment is not code
  const char* text_ = "private: KOKKOS_LAMBDA";

 public:
  void forward(int n) {
    Kokkos::parallel_for(n, KOKKOS_LAMBDA(int i) { (void)i; });
    if (n > 0) {
      Kokkos::parallel_for(n, KOKKOS_LAMBDA(int i) { (void)i; });
    }
  }
};

struct Plain {
  void run(int n) { Kokkos::parallel_for(n, KOKKOS_LAMBDA(int i) { (void)i; }); }
};

class Outer {
 public:
  struct Inner {
    void visible(int n) { Kokkos::parallel_for(n, KOKKOS_LAMBDA(int i) { (void)i; }); }
  };
};
