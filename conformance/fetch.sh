#!/bin/sh
# Fetch the PyTorch test files conformance/run.py runs (they are not in the
# torch wheel) into conformance/pytorch/ (git-ignored): a sparse, blobless
# checkout of the tag matching the installed torch. Nothing fetched here is
# committed.
set -eu
cd "$(dirname "$0")"
TAG="${PYTORCH_TAG:-v2.13.0}"
if [ -d pytorch/.git ]; then
    echo "conformance/pytorch already present (remove it to fetch $TAG again)"
    exit 0
fi
git clone --quiet --depth 1 --branch "$TAG" --filter=blob:none --sparse https://github.com/pytorch/pytorch pytorch
cd pytorch
git sparse-checkout set --no-cone \
    /test/cpp_extensions/open_registration_extension/torch_openreg/tests/ \
    /test/test_view_ops.py /test/test_indexing.py /test/test_reductions.py \
    /test/test_binary_ufuncs.py /test/test_ops.py /test/test_sparse.py
echo "PyTorch $TAG test files in conformance/pytorch/test/"
