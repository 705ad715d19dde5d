// MLX's CUDA headers (lru_cache.h) include fmt for one error message, and the mlx-cuda
// wheel ships no fmt. This step never instantiates that code; the declaration lets the
// headers compile.
#pragma once

#include <string>

namespace fmt {
template <typename... Args>
std::string format(const char* text, Args&&...) {
  return text;
}
}  // namespace fmt
