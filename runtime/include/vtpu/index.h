/* vtpu/index.h — indexing and data movement: gather/scatter, index_select/put/add, embedding, masked ops, nonzero, cat, flip, roll, tril/triu, sort/topk, arange/linspace/eye.
 * Part of the public C API: included by vtpu/vtpu.h, never on its own. */
#ifndef VTPU_INDEX_H
#define VTPU_INDEX_H

#endif /* VTPU_INDEX_H */
