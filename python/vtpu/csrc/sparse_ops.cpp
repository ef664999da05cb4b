// sparse_ops.cpp — sparse tpu tensors (COO and the compressed layouts CSR,
// CSC, BSR, BSC). A sparse tensor is a few dense tpu tensors (indices,
// values) in PyTorch's sparse TensorImpls; the kernels that build it, read
// or change its structure are PyTorch's own device-generic ones, registered
// here for the Sparse(Csr)PrivateUse1 keys as CUDA registers them. Every
// other op on a sparse tpu tensor runs through the counted CPU fallback on
// a sparse CPU twin whose members alias device memory (fallback.cpp).
#include <ATen/ATen.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_dimI_native.h>
#include <ATen/ops/_dimV_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_to_dense_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>
#include <ATen/native/DispatchStub.h>
#include <torch/library.h>

#include <vector>

// The DispatchStub behind at::sparse::flatten_indices (PyTorch keeps its
// declaration in a header the wheel does not ship; the symbol is exported).
namespace at::native {
using flatten_indices_fn = at::Tensor (*)(const at::Tensor& indices, c10::IntArrayRef size);
DECLARE_DISPATCH(flatten_indices_fn, flatten_indices_stub)
}  // namespace at::native

namespace vtpu {
namespace {

using namespace at::native;

// The row-major linear index of each COO coordinate (a column of indices,
// sparse_dim x nnz) in a tensor of the given size: what building a sparse
// tensor with is_coalesced=True checks its indices with. Native tpu ops.
at::Tensor flatten_indices_tpu(const at::Tensor& indices, c10::IntArrayRef size) {
  const int64_t sparse_dim = indices.size(0);
  std::vector<int64_t> strides(static_cast<size_t>(sparse_dim));
  int64_t stride = 1;
  for (int64_t d = sparse_dim - 1; d >= 0; d--) {
    strides[static_cast<size_t>(d)] = stride;
    stride *= size[d];
  }
  const at::Tensor st = at::tensor(strides, indices.options().device(c10::kCPU)).to(indices.device());
  return indices.mul(st.unsqueeze(1)).sum(0);
}

REGISTER_PRIVATEUSE1_DISPATCH(flatten_indices_stub, &flatten_indices_tpu)

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(new_with_dims_sparse));
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", TORCH_FN(new_with_dims_and_tensor_sparse_symint));
  m.impl("empty.memory_format", TORCH_FN(empty_sparse_symint));
  m.impl("empty_like", TORCH_FN(empty_like_sparse_coo));
  m.impl("sparse_resize_", TORCH_FN(sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(sparse_resize_and_clear_));
  m.impl("resize_as_sparse_", TORCH_FN(resize_as_sparse_));
  m.impl("sparse_dim", TORCH_FN(sparse_dim_sparse));
  m.impl("_dimI", TORCH_FN(sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(dense_dim_sparse));
  m.impl("_dimV", TORCH_FN(dense_dim_sparse));
  m.impl("_nnz", TORCH_FN(_nnz_sparse));
  m.impl("is_coalesced", TORCH_FN(is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(_coalesced_sparse_));
  m.impl("_indices", TORCH_FN(_indices_sparse));
  m.impl("_values", TORCH_FN(_values_sparse));
  m.impl("indices", TORCH_FN(indices_sparse));
  m.impl("values", TORCH_FN(values_sparse));
  m.impl("copy_", TORCH_FN(copy_sparse_wrapper_));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(copy_sparse_));
  m.impl("zero_", TORCH_FN(zero_sparse_));
  m.impl("clone", TORCH_FN(clone_sparse));
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_sparse_compressed_symint));
  m.impl("empty_like", TORCH_FN(empty_like_sparse_csr));
  m.impl("resize_", TORCH_FN(resize_sparse_csr_));
  m.impl("resize_as_sparse_", TORCH_FN(resize_as_sparse_compressed_));
  m.impl("sparse_dim", TORCH_FN(sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(dense_dim_sparse_csr));
  m.impl("_nnz", TORCH_FN(_nnz_sparse_csr));
  m.impl("crow_indices", TORCH_FN(crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(row_indices_sparse_csr));
  m.impl("values", TORCH_FN(values_sparse_csr));
  m.impl("copy_", TORCH_FN(copy_sparse_compressed_));
  m.impl("clone", TORCH_FN(clone_sparse_compressed));
  m.impl("zero_", TORCH_FN(zero_sparse_csr_));
  m.impl("_to_dense", TORCH_FN(sparse_compressed_to_dense));
}

}  // namespace
}  // namespace vtpu
