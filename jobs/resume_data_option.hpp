#pragma once
// --resume-data of fnvlp-pretrain and fnvlp-finetune (train::PretrainOptions::
// resume_on_changed_data).
#include <cxxopts.hpp>
#include <string>

#include "fnvlp/comm/job_main.hpp"

namespace fnvlp {

inline void add_resume_data_option(cxxopts::Options& cli, std::string& value) {
  cli.add_options()("resume-data",
                    "same (default: a checkpoint written on other data is refused) or changed "
                    "(keep the model, optimizer and step; reset every per-pair state; start a "
                    "new epoch)",
                    cxxopts::value(value)->default_value("same"));
}

// True for "changed"; anything but "same" or "changed" is a usage error (exit 2).
inline bool resume_on_changed_data(const std::string& value) {
  if (value != "same" && value != "changed")
    throw UsageError("--resume-data: '" + value + "' (same or changed)");
  return value == "changed";
}

}  // namespace fnvlp
