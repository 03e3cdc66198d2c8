// The timers' device clock on a GPU (observe::DeviceClock): CUDA events with timing, recorded on the device's current
// stream, kept in a pool and handed out again once read.
#pragma once

#include <c10/core/Device.h>

#include <memory>

#include "mds/observe/timers.h"

namespace mds::trainer {

// A clock of events on `device`'s current stream; null for a device without one (the CPU).
std::shared_ptr<observe::DeviceClock> make_device_clock(c10::Device device);

}  // namespace mds::trainer
