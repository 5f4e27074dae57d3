// Every matrix of a bound model with its role, in one order: the walk behind Model::matrices() (the
// adapter merge, the DoRA view) and quantise on load (model/quantize.cpp, whose rule reads the role).
// Roles: "embedding", a mixer kind's own names ("self_attn.q_proj", "mamba.x_proj", ...), "router",
// "latent", "expert", "shared", "mlp", "lm_head" (absent when tied to the embedding). Empty matrices
// are skipped. Private to engine/model.
#pragma once
#include <functional>

#include "engine/model/weights.h"

namespace hl {

void each_matrix_role(Model& m, const std::function<void(const char* role, Mat&)>& f);

}  // namespace hl
