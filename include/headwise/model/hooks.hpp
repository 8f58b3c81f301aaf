// Hooks of a whole model's run: the hook function's type, where one is called and the ready-made
// ones are headwise's (hook_function.hpp; the head interventions, head_interventions.hpp), named
// here too, as the model's run takes them (RunOptions::hook_functions, by hook name).
#pragma once

#include "headwise/head_interventions.hpp"
#include "headwise/hook_function.hpp"

namespace headwise::model {

using headwise::HookFunction;
using headwise::HookPoint;
using headwise::replace_with;

}  // namespace headwise::model
