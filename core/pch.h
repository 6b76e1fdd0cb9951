// The precompiled header: the heavy torch includes, compiled once per build (see cmake/PareDeps.cmake).
#pragma once
#include <torch/torch.h>
