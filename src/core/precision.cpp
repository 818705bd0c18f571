// The precision policy (gpipe/core/precision.hpp).
#include "gpipe/core/precision.hpp"

#include <fmt/format.h>

#include "gpipe/core/error.hpp"

namespace gpipe {

const char* name(Format format) {
  switch (format) {
    case Format::fp16: return "fp16";
    case Format::bf16: return "bf16";
    case Format::fp32: return "fp32";
    case Format::fp64: return "fp64";
  }
  return "?";
}

int bytes(Format format) {
  switch (format) {
    case Format::fp16:
    case Format::bf16: return 2;
    case Format::fp32: return 4;
    case Format::fp64: return 8;
  }
  return 0;
}

const char* const* precision_names() {
  static const char* const names[kPrecisionCount] = {"float", "double", "bf16", "fp16"};
  return names;
}

Precision precision_policy(const std::string& text, const std::string& field) {
  Precision p;
  p.name = text;
  if (text == "float") return p;
  if (text == "double") {
    p.compute = p.accumulate = p.master = p.wire = Format::fp64;
    return p;
  }
  if (text == "bf16" || text == "fp16") {
    const Format f = text == "bf16" ? Format::bf16 : Format::fp16;
    p.compute = p.wire = f;
    p.loss_scaling = f == Format::fp16;
    return p;
  }
  throw InputError(fmt::format("{}: unknown precision '{}' (expected float, double, bf16 or fp16)", field, text));
}

}  // namespace gpipe
