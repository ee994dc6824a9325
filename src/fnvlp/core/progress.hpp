#pragma once
// Progress reports from long loops (a batch of images decoded, a shard hashed, a candidate tile
// folded, a batch encoded): they beat the tool watchdog when a tool installed one
// (comm/watchdog.hpp ToolWatchdog), and cost an atomic load otherwise. Any thread may call.

namespace fnvlp {

// `what` names the phase in the watchdog's message should this be the last report. Also the
// fault site progress.sleep (core/fault.hpp), counted per process.
void progress(const char* what);

// The function progress() calls (nullptr: none); returns the previous one.
using ProgressHook = void (*)(const char* what);
ProgressHook set_progress_hook(ProgressHook hook);

}  // namespace fnvlp
