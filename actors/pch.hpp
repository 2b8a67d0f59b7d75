// Precompiled header of the actor library: LibTorch and CAF are both heavy.
#pragma once
#include <torch/torch.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>
