// Hooks of a whole model's run: the hook function's type (HookFunction), where one is called
// (HookPoint) and replace_with are headwise's (hook_function.hpp), named here too, as the model's
// run takes them (RunOptions::hook_functions, by hook name); in_turn and the head interventions
// stay headwise's (hook_function.hpp, head_interventions.hpp), which this header includes.
#pragma once

#include "headwise/head_interventions.hpp"
#include "headwise/hook_function.hpp"

namespace headwise::model {

using headwise::HookFunction;
using headwise::HookPoint;
using headwise::replace_with;

}  // namespace headwise::model
