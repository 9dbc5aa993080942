# Defines ddprun::cairo, the plotting library of the run outputs.
# pkg-config's cairo.pc first (Debian's libcairo2-dev). Its Requires.private
# list (pixman, fontconfig, xcb, ...) makes pkg-config fail where only
# cairo's own library and headers are present, as on a GPU node given
# unpacked Debian packages (scripts/gpu_prepare.sh), so then the header and
# the library are looked up directly; -DDDPRUN_CAIRO_INCLUDE_DIR and
# -DDDPRUN_CAIRO_LIBRARY name them by hand.
if(TARGET ddprun::cairo)
  return()
endif()
find_package(PkgConfig REQUIRED)
pkg_check_modules(CAIRO QUIET IMPORTED_TARGET cairo)
if(CAIRO_FOUND)
  add_library(ddprun::cairo ALIAS PkgConfig::CAIRO)
  return()
endif()
find_path(DDPRUN_CAIRO_INCLUDE_DIR cairo.h PATH_SUFFIXES cairo)
find_library(DDPRUN_CAIRO_LIBRARY NAMES cairo)
if(NOT DDPRUN_CAIRO_INCLUDE_DIR OR NOT DDPRUN_CAIRO_LIBRARY)
  message(FATAL_ERROR
    "cairo not found (the trainers draw their plots with it): install "
    "libcairo2-dev (Debian, Ubuntu) or cairo-devel (Fedora), or pass "
    "-DDDPRUN_CAIRO_INCLUDE_DIR=<dir with cairo.h> "
    "-DDDPRUN_CAIRO_LIBRARY=<path of libcairo.so>")
endif()
message(STATUS "cairo: ${DDPRUN_CAIRO_LIBRARY} (no usable cairo.pc)")
add_library(ddprun_cairo_found INTERFACE)
target_include_directories(ddprun_cairo_found SYSTEM INTERFACE ${DDPRUN_CAIRO_INCLUDE_DIR})
target_link_libraries(ddprun_cairo_found INTERFACE ${DDPRUN_CAIRO_LIBRARY})
add_library(ddprun::cairo ALIAS ddprun_cairo_found)
