// The C allocator's settings for a campaign process (docs/CAMPAIGN.md "Memory and the allocator").
#pragma once

namespace driftcheck::fuzz {

// glibc returns freed memory to the kernel as soon as a heap's free top passes 128 KiB, and serves blocks
// above its (adaptive) mmap threshold with mmap: a campaign, which frees and allocates a case's tensors
// thousands of times a second on every thread, then spends its time in page faults and in madvise / munmap,
// whose TLB shootdowns interrupt every CPU that runs one of the process's threads. This keeps freed memory
// for reuse (trim threshold 1 GiB) and maps only blocks of 32 MiB or more (real-size model cases) on their
// own. Peak memory is unchanged; only the return of memory between peaks is given up. A GLIBC_TUNABLES that
// sets any glibc.malloc tunable wins: the user chose. Without glibc, nothing is done.
void tune_allocator();

}  // namespace driftcheck::fuzz
