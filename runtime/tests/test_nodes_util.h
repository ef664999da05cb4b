/* test_nodes_util.h — what the node tests share about the elementwise
 * kinds: the tensor inputs each takes. */
#ifndef VTPU_TEST_NODES_UTIL_H
#define VTPU_TEST_NODES_UTIL_H

#include "graph/node.h"

static inline int nsrc_of(vt_node_kind k) {
    switch (k) {
    case VT_NODE_UNARY: case VT_NODE_COPY: return 1;
    case VT_NODE_BINARY: return 2;
    case VT_NODE_TERNARY: case VT_NODE_WHERE: return 3;
    default: return 0;
    }
}

#endif
