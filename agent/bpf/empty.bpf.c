// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Empty probes: the baseline the overhead benchmark compares the real probes against
 * (the cost of the uprobe trap itself, with no work in the program). */
#include "common.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("uprobe")
int empty_entry(struct ingero_regs *ctx)
{
	return 0;
}

SEC("uretprobe")
int empty_return(struct ingero_regs *ctx)
{
	return 0;
}
