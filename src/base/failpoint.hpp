// Fault injection for the crash tests: a process started with
//   SAO_FAILPOINT=NAME        (or NAME@N: the Nth time it passes there)
// kills itself with SIGKILL at the point named NAME, exactly as `kill -9`
// would, but at a moment a test could not hit from outside (between the two
// renames of a checkpoint swap). Without the variable a failpoint costs one
// comparison. The points are listed where they are placed:
//   swap.staged:DIR     the staging copy of DIR is written, not yet renamed
//   swap.complete:DIR   the complete copy exists beside the old DIR
//   swap.previous:DIR   the old DIR was moved to DIR.previous, the new one not yet in place
#pragma once

#include <string>

namespace sao::base {

void failpoint(const std::string& name);

}  // namespace sao::base
