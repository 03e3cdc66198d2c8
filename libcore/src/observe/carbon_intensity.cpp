// Country carbon intensities: the generated table (carbon_intensity_table.inc) and its lookup.
#include "mds/observe/carbon_intensity.h"

#include <algorithm>
#include <string>

namespace mds::observe {

namespace {

#include "carbon_intensity_table.inc"  // kCountryCarbonIntensities, kWorldAverageFromCodecarbon

static_assert(kWorldAverageFromCodecarbon == kWorldAverageCarbonIntensity,
              "codecarbon's world average changed: update kWorldAverageCarbonIntensity");

}  // namespace

std::span<const CountryCarbonIntensity> country_carbon_intensities() { return kCountryCarbonIntensities; }

const CountryCarbonIntensity* find_country_carbon_intensity(std::string_view iso_code) {
    std::string key(iso_code);
    for (char& c : key)
        if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    const auto table = country_carbon_intensities();
    const auto it =
        std::lower_bound(table.begin(), table.end(), key,
                         [](const CountryCarbonIntensity& e, const std::string& k) { return e.iso_code < k; });
    return it != table.end() && it->iso_code == key ? &*it : nullptr;
}

double emissions_kg(double energy_kwh, double g_co2e_per_kwh) { return g_co2e_per_kwh * 0.001 * energy_kwh; }

}  // namespace mds::observe
