/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_BASE_HUGETLB_H
#define NRM_BASE_HUGETLB_H

/* The huge page sizes one container's limits can name: the most any
 * architecture's kernel offers (arm64 with 4 KiB pages: 64 KiB, 2 MiB,
 * 32 MiB, 1 GiB; x86-64 has 2). A claim over more sizes is refused, by
 * name, where the memory driver builds the limits. */
#define NRM_HUGETLB_SIZES_MAX 4

#endif
