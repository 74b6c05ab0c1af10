#include "driftcheck/fuzz/allocator.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace driftcheck::fuzz {

void tune_allocator() {
#if defined(__GLIBC__)
  if (const char* t = std::getenv("GLIBC_TUNABLES");
      t != nullptr && std::strstr(t, "glibc.malloc.") != nullptr)
    return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace driftcheck::fuzz
