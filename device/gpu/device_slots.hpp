// What a GPU run needs on the host side, reused across runs so that no run allocates or synchronises the
// device: a slot per concurrent worker (its own stream, a device arena and a pinned staging buffer, grown to
// the largest run seen and never shrunk), leased from a process-wide pool without holding any lock while the
// device works; and a packed transfer that moves every buffer of a run with one host-to-device and one
// device-to-host copy through the slot's pinned staging.
//
// Slot streams are ordinary (blocking) streams: work a plugin enqueues on the legacy default stream is still
// ordered with a slot's copies (docs/PLUGIN.md); driftcheck's own kernels never use the default stream, so
// slots never wait for each other.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "platform.hpp"

namespace driftcheck::gpu {

// Throws BackendError("<what>: <runtime message>") unless e is hipSuccess.
void check(hipError_t e, const char* what);

// Whether a GPU can run anything here; when not, `why` says so ("no GPU: ..."). Asked once per process: a
// campaign asks every backend, and the answer cannot change while it runs.
bool device_present(std::string* why = nullptr);
// How many GPUs this process sees (0 with the reason in `why` when none); asked once per process.
int device_count(std::string* why = nullptr);

class DeviceSlot {
 public:
  DeviceSlot();  // a stream on the calling thread's current device
  ~DeviceSlot();
  DeviceSlot(const DeviceSlot&) = delete;
  DeviceSlot& operator=(const DeviceSlot&) = delete;

  int device() const { return device_; }
  int warp_size() const { return warp_size_; }  // lanes per warp of the device (32 on NVIDIA, 64 on CDNA)
  hipStream_t stream() const { return stream_; }
  // Makes the device arena and the pinned staging at least `bytes` long. Growing frees the old buffers, so it
  // happens only between runs (the slot's stream is idle then).
  void reserve(std::size_t bytes);
  std::byte* arena() const { return arena_; }
  std::byte* staging() const { return staging_; }
  // Waits until the stream has finished, giving the core to other threads meanwhile (a worker waiting for
  // its kernel must not spin on a core another worker needs for the reference or the oracle); throws on a
  // device error. Marks the slot idle.
  void wait(const char* what);
  void mark_busy() { busy_ = true; }
  // After an exception between enqueue and wait: drains the stream (errors ignored) so that the next lease
  // never writes into staging a copy is still reading.
  void drain();

 private:
  int device_ = 0;
  int warp_size_ = 0;
  hipStream_t stream_ = nullptr;
  std::byte* arena_ = nullptr;
  std::byte* staging_ = nullptr;
  std::size_t capacity_ = 0;
  bool busy_ = false;
};

// A slot for the duration of one run: a free slot of the calling thread's current device from the pool, or a
// new one when all are leased (so the pool holds as many slots per device as runs were ever in flight at
// once: the campaign's --jobs). Returned, drained, on destruction.
class SlotLease {
 public:
  SlotLease();
  ~SlotLease();
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;
  DeviceSlot& operator*() const { return *slot_; }
  DeviceSlot* operator->() const { return slot_; }

 private:
  DeviceSlot* slot_;
};

// One buffer of a run on the host: uploaded before the launch, downloaded after it, or both.
struct HostBuffer {
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  bool upload = true;
  bool download = true;
};

// A run's buffers packed into the slot's arena, each 256-byte aligned. upload() stages every uploaded buffer
// in pinned memory and enqueues one copy of the span that covers them; download() enqueues one copy of the
// span covering every downloaded buffer, waits, and unpacks. Buffers are copied whole: a storage travels with
// its guard bands both ways, so the oracle's storage check sees exactly what the kernel left on the device.
class PackedRun {
 public:
  PackedRun(DeviceSlot& slot, std::vector<HostBuffer> buffers);
  std::byte* device(std::size_t i) const { return slot_.arena() + offsets_[i]; }
  void upload();
  void download();

 private:
  DeviceSlot& slot_;
  std::vector<HostBuffer> buffers_;
  std::vector<std::size_t> offsets_;
  std::size_t up_begin_ = 0, up_end_ = 0, down_begin_ = 0, down_end_ = 0;
};

}  // namespace driftcheck::gpu
