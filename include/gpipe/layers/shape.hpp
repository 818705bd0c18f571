#pragma once
// The per-sample shape of an activation. Between layers every activation is a
// row-major (samples, features) matrix; a layer reads the features of one
// sample as a shape:
//   (features)                 flat vectors (dense, the class logits)
//   (channels, height, width)  images, NCHW: element (c, h, w) of sample i is
//                              column (c * height + h) * width + w of row i
//   (tokens, width)            sequences: element (t, j) is column t * width + j
// A Shape is plain data (no Kokkos), so deck validation and the shape pass
// (model/shapes.hpp) run without a Kokkos runtime.

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

struct Shape {
  std::vector<std::int64_t> dims;  ///< outermost first; empty means "not given"

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> d) : dims(d) {}
  explicit Shape(std::vector<std::int64_t> d) : dims(std::move(d)) {}

  /// Number of dimensions (1 for flat features, 3 for images).
  int rank() const { return int(dims.size()); }
  /// Features per sample: the product of the dimensions (0 if none).
  std::int64_t size() const;
  std::int64_t operator[](int i) const { return dims[size_t(i)]; }
  /// As in a deck: "[1, 28, 28]", "[784]".
  std::string str() const;
  bool operator==(const Shape& o) const { return dims == o.dims; }
  bool operator!=(const Shape& o) const { return dims != o.dims; }
};

/// One parameter tensor of a layer: `rows` x `cols` row-major (a vector has
/// rows == 1). Checkpoints store each as a 2-D dataset of this shape.
struct ParameterSpec {
  std::string name;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t size() const { return rows * cols; }
};

}  // namespace gpipe
