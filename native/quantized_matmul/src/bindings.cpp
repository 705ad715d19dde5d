#include <nanobind/nanobind.h>

#include "kernels.h"
#include "primitive.h"

namespace nb = nanobind;
using namespace nb::literals;

NB_MODULE(_qmm, m) {
  m.doc() = "MLX Lab's AVX2/FMA quantized matmul for MLX's CPU backend";
  m.def("quantized_matmul", &mlxlab::quantized_matmul, "x"_a, "w"_a, "scales"_a, "biases"_a,
        "group_size"_a, "bits"_a,
        "x @ dequantize(w, scales, biases, group_size, bits).T (affine, 4 or 8 bits).");
  m.def("blas_min_rows", &mlxlab::blas_min_rows);
  m.def("set_blas_min_rows", &mlxlab::set_blas_min_rows, "rows"_a);
  m.def("blas_found", &mlxlab::blas_found);
  m.def("thread_count", &mlxlab::thread_count);
  m.def("set_thread_count", &mlxlab::set_thread_count, "threads"_a);
  m.def("kernel_name", &mlxlab::kernel_name);
  m.def("int8_activations", &mlxlab::int8_activations);
  m.def("set_int8_activations", &mlxlab::set_int8_activations, "on"_a);
}
