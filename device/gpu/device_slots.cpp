#include "device_slots.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/gpu.hpp"

namespace driftcheck::gpu {

void check(hipError_t e, const char* what) {
  if (e != hipSuccess) throw BackendError(std::string(what) + ": " + hipGetErrorString(e));
}

int device_count(std::string* why) {
  static std::once_flag once;
  static int count = 0;
  static std::string reason;
  std::call_once(once, [] {
    const hipError_t e = hipGetDeviceCount(&count);
    if (e != hipSuccess)
      count = 0, reason = std::string("no GPU: ") + hipGetErrorString(e);
    else if (count == 0)
      reason = "no GPU: no device found";
  });
  if (why && !reason.empty()) *why = reason;
  return count;
}

bool device_present(std::string* why) {
  return device_count(why) > 0;
}

DeviceSlot::DeviceSlot() {
  check(hipGetDevice(&device_), "hipGetDevice");
  check(hipDeviceGetAttribute(&warp_size_, hipDeviceAttributeWarpSize, device_), "hipDeviceGetAttribute");
  check(hipStreamCreate(&stream_), "hipStreamCreate");
}

// Errors are ignored: a slot is destroyed only at process exit, when the runtime may already be gone.
DeviceSlot::~DeviceSlot() {
  (void)hipFree(arena_);
  (void)hipHostFree(staging_);
  (void)hipStreamDestroy(stream_);
}

void DeviceSlot::reserve(std::size_t bytes) {
  if (bytes <= capacity_) return;
  // Powers of two from 1 MiB: a campaign's case sizes vary by orders of magnitude, and each growth costs a
  // device-wide synchronisation (hipFree), so a slot grows a handful of times in its life.
  const std::size_t want = std::bit_ceil(std::max<std::size_t>(bytes, std::size_t{1} << 20));
  (void)hipFree(arena_);
  (void)hipHostFree(staging_);
  arena_ = staging_ = nullptr;
  capacity_ = 0;
  void* a = nullptr;
  void* s = nullptr;
  check(hipMalloc(&a, want), "device arena (hipMalloc)");
  arena_ = static_cast<std::byte*>(a);
  check(hipHostMalloc(&s, want, hipHostMallocDefault), "pinned staging (hipHostMalloc)");
  staging_ = static_cast<std::byte*>(s);
  capacity_ = want;
}

void DeviceSlot::wait(const char* what) {
  hipError_t e;
  while ((e = hipStreamQuery(stream_)) == hipErrorNotReady) std::this_thread::yield();
  busy_ = false;
  check(e, what);
}

void DeviceSlot::drain() {
  if (busy_) (void)hipStreamSynchronize(stream_);
  busy_ = false;
}

namespace {

struct SlotPool {
  std::mutex mu;
  std::vector<std::unique_ptr<DeviceSlot>> slots;
  std::vector<DeviceSlot*> free;
};

// Never destroyed: the slots' device memory goes with the process, and freeing it from a static destructor
// could run after the runtime's own teardown.
SlotPool& pool() {
  static SlotPool* p = new SlotPool;
  return *p;
}

std::atomic<int> g_device{0};  // gpu_use_device()

DeviceSlot* acquire() {
  // The runtime's current device is per thread: each lease makes the process's GPU the calling thread's, so
  // the copies, the launch and a device plugin's own calls all go to it.
  const int device = g_device.load();
  check(hipSetDevice(device), "hipSetDevice");
  SlotPool& p = pool();
  {
    const std::lock_guard<std::mutex> lock(p.mu);
    const auto it =
        std::find_if(p.free.begin(), p.free.end(), [&](DeviceSlot* s) { return s->device() == device; });
    if (it != p.free.end()) {
      DeviceSlot* s = *it;
      p.free.erase(it);
      return s;
    }
  }
  auto fresh = std::make_unique<DeviceSlot>();  // outside the lock: creating a stream can take a while
  const std::lock_guard<std::mutex> lock(p.mu);
  p.slots.push_back(std::move(fresh));
  return p.slots.back().get();
}

}  // namespace

SlotLease::SlotLease() : slot_(acquire()) {}

SlotLease::~SlotLease() {
  slot_->drain();
  SlotPool& p = pool();
  const std::lock_guard<std::mutex> lock(p.mu);
  p.free.push_back(slot_);
}

PackedRun::PackedRun(DeviceSlot& slot, std::vector<HostBuffer> buffers)
    : slot_(slot), buffers_(std::move(buffers)) {
  constexpr std::size_t kAlign = 256;  // every buffer starts where any vector access of a kernel may start
  std::size_t end = 0;
  up_begin_ = down_begin_ = SIZE_MAX;
  for (const HostBuffer& b : buffers_) {
    offsets_.push_back(end);
    const std::size_t stop = end + b.bytes;
    if (b.upload) up_begin_ = std::min(up_begin_, end), up_end_ = std::max(up_end_, stop);
    if (b.download) down_begin_ = std::min(down_begin_, end), down_end_ = std::max(down_end_, stop);
    end =
        (std::max(stop, end + 1) + kAlign - 1) / kAlign * kAlign;  // an empty buffer gets its own address too
  }
  slot_.reserve(end);
}

void PackedRun::upload() {
  for (std::size_t i = 0; i < buffers_.size(); ++i)
    if (buffers_[i].upload && buffers_[i].bytes)
      std::memcpy(slot_.staging() + offsets_[i], buffers_[i].data, buffers_[i].bytes);
  if (up_end_ <= up_begin_ || up_begin_ == SIZE_MAX) return;
  slot_.mark_busy();
  check(hipMemcpyAsync(slot_.arena() + up_begin_, slot_.staging() + up_begin_, up_end_ - up_begin_,
                       hipMemcpyHostToDevice, slot_.stream()),
        "upload");
}

void PackedRun::download() {
  if (down_end_ > down_begin_ && down_begin_ != SIZE_MAX) {
    slot_.mark_busy();
    check(hipMemcpyAsync(slot_.staging() + down_begin_, slot_.arena() + down_begin_, down_end_ - down_begin_,
                         hipMemcpyDeviceToHost, slot_.stream()),
          "download");
  }
  slot_.wait("kernel or copy");
  for (std::size_t i = 0; i < buffers_.size(); ++i)
    if (buffers_[i].download && buffers_[i].bytes)
      std::memcpy(buffers_[i].data, slot_.staging() + offsets_[i], buffers_[i].bytes);
}

}  // namespace driftcheck::gpu

namespace driftcheck {

int gpu_device_count(std::string* why) {
  return gpu::device_count(why);
}

void gpu_use_device(int ordinal) {
  gpu::g_device.store(ordinal);
}

}  // namespace driftcheck
