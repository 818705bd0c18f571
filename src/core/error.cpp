#include "gpipe/core/error.hpp"

namespace gpipe {

void require(bool condition, const std::string& message) {
  if (!condition) throw InputError(message);
}

}  // namespace gpipe
