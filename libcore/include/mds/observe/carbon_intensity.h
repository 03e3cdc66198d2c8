// Carbon intensity of the electricity grid per country, as codecarbon's offline tracker uses it
// (specs/ops.md §1.3 step 4): a table generated from codecarbon's global_energy_mix.json (Our World in
// Data, CC BY 4.0; see NOTICE) by scripts/gen_carbon_intensity.py, and codecarbon's world average for
// codes it does not know. Regional data (USA / CAN states, Nordic bidding zones) is not carried.
#pragma once

#include <span>
#include <string_view>

namespace mds::observe {

struct CountryCarbonIntensity {
    std::string_view iso_code;      // ISO 3166-1 alpha-3, upper case ("FRA")
    std::string_view country_name;  // as codecarbon writes it in emissions.csv ("France")
    double g_co2e_per_kwh = 0;      // grams CO2-equivalent per kWh
    int year = 0;                   // year of the source data
};

// codecarbon's carbon_intensity_per_source.json "world_average" (g/kWh), used for unknown countries.
inline constexpr double kWorldAverageCarbonIntensity = 475.0;

// All countries, sorted by ISO code.
std::span<const CountryCarbonIntensity> country_carbon_intensities();

// The entry for an ISO alpha-3 code, matched case-insensitively; nullptr when the table lacks it.
const CountryCarbonIntensity* find_country_carbon_intensity(std::string_view iso_code);

// kg CO2eq for an energy in kWh at an intensity in g/kWh, computed as codecarbon does
// (EmissionsPerKWh.from_g_per_kWh(g).kgs_per_kWh × kWh, i.e. (g × 0.001) × kWh).
double emissions_kg(double energy_kwh, double g_co2e_per_kwh);

}  // namespace mds::observe
