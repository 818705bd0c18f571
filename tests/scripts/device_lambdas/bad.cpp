// Known-bad fixture for scripts/check_device_lambdas.py (never compiled):
// every line marked HIT launches a KOKKOS_LAMBDA that nvcc rejects; the
// checker must report exactly those lines.
#include <Kokkos_Core.hpp>

template <class T>
class Private final : public Base<T> {
 public:
  void fine(int n) {
    Kokkos::parallel_for(n, KOKKOS_LAMBDA(int i) { (void)i; });
  }

 private:
  void hidden(int n) {
    Kokkos::parallel_for("x", n, KOKKOS_LAMBDA(int i) { (void)i; });  // HIT
  }
  int value_ = 0;
};

struct Protected {
 protected:
  void hidden(int n)
  {
    Kokkos::parallel_for(n, KOKKOS_CLASS_LAMBDA(int i) { (void)i; });  // HIT
  }
};

class DefaultPrivate {
  void hidden(int n) { Kokkos::parallel_for(n, KOKKOS_LAMBDA(int i) { (void)i; }); }  // HIT
};

class Outer {
 private:
  struct Inner {
    void visible(int n) { Kokkos::parallel_for(n, KOKKOS_LAMBDA(int i) { (void)i; }); }  // HIT
  };
};

template <class T>
class OutOfClass {
 public:
  void run(int n);
 private:
  void step(int n);
};

template <class T>
void OutOfClass<T>::step(int n) {
  Kokkos::parallel_for(n, KOKKOS_LAMBDA(int i) { (void)i; });  // HIT
}

template <class T>
void OutOfClass<T>::run(int n) {
  Kokkos::parallel_for(n, KOKKOS_LAMBDA(int i) { (void)i; });
}

// A GoogleTest body is a private TestBody(): nvcc rejects the lambda.
TEST(Suite, Name) {
  Kokkos::parallel_for(4, KOKKOS_LAMBDA(int i) { (void)i; });  // HIT
}
