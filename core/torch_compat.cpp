#include "core/torch_compat.h"

#include <ATen/Context.h>

namespace pare::compat {

bool cuda_available() { return at::hasCUDA(); }

}  // namespace pare::compat
