#include "device_clock.h"

#include <ATen/DeviceAccelerator.h>
#include <c10/core/Event.h>

#include <cstddef>
#include <vector>

namespace mds::trainer {
namespace {

class EventClock final : public observe::DeviceClock {
public:
    explicit EventClock(c10::Device device) : device_(device) {}

    std::size_t mark() override {
        std::size_t m;
        if (free_.empty()) {
            m = events_.size();
            events_.emplace_back(device_.type(), c10::EventFlag::BACKEND_DEFAULT);  // with timing
        } else {
            m = free_.back();
            free_.pop_back();
        }
        events_[m].record(at::accelerator::getCurrentStream(device_.index()));
        return m;
    }

    bool passed(std::size_t m) override { return events_[m].query(); }

    double elapsed_ms(std::size_t from, std::size_t to) override {
        if (!events_[to].query()) events_[to].synchronize();  // a wait only where the device is behind
        return events_[from].elapsedTime(events_[to]);
    }

    void release(std::size_t m) override { free_.push_back(m); }

private:
    c10::Device device_;
    std::vector<c10::Event> events_;
    std::vector<std::size_t> free_;
};

}  // namespace

std::shared_ptr<observe::DeviceClock> make_device_clock(c10::Device device) {
    if (!device.is_cuda()) return nullptr;
    return std::make_shared<EventClock>(c10::Device(device.type(), device.has_index() ? device.index() : 0));
}

}  // namespace mds::trainer
