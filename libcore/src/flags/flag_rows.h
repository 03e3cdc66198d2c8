// The rows of the flag table and the number format of its help defaults (private to the flags area).
#pragma once

#include <string>
#include <vector>

#include "mds/flags/flag_table.h"

namespace mds::flags {

std::vector<FlagRow> megatron_flag_rows();

// A double as the help's "[default: ...]" and the error messages write it (C++ stream form: 1e-05).
std::string format_number(double v);

}  // namespace mds::flags
