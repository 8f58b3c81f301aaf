// The version of headwise, as macros. CMake reads the project version from this file.
#pragma once

#define HEADWISE_VERSION_MAJOR 0
#define HEADWISE_VERSION_MINOR 2
#define HEADWISE_VERSION_PATCH 0
/// One number that compares: 10000 major + 100 minor + patch.
#define HEADWISE_VERSION (HEADWISE_VERSION_MAJOR * 10000 + HEADWISE_VERSION_MINOR * 100 + HEADWISE_VERSION_PATCH)
#define HEADWISE_VERSION_STRING "0.2.0"
