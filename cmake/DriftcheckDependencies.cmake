# driftcheck_find_dependencies(): finds every library driftcheck needs and, when some are missing, stops with one
# message naming all of them and the Debian 12 packages that provide them (instead of stopping at the first). The
# Python package's build (python/setup.py) shows this message when `pip install ./python` runs CMake.
macro(driftcheck_find_dependencies)
  set(_dc_missing "")
  set(_dc_packages "")
  # name|version or -|Debian packages|further find_package arguments
  set(_dc_deps
      "Eigen3|3.4|libeigen3-dev|NO_MODULE"
      "Threads|-|build-essential|"
      "nlohmann_json|3.10|nlohmann-json3-dev|"
      "CLI11|2.1|libcli11-dev|"
      "fmt|9|libfmt-dev|"
      "rapidcheck|-|librapidcheck-dev|"
      "tomlplusplus|3|libtomlplusplus-dev|"
      "OpenSSL|3|libssl-dev|COMPONENTS Crypto")
  if(DRIFTCHECK_BUILD_TESTS)
    list(APPEND _dc_deps "GTest|-|libgtest-dev libgmock-dev|")
  endif()
  if(DRIFTCHECK_BUILD_BENCH)
    list(APPEND _dc_deps "benchmark|-|libbenchmark-dev|")
  endif()
  foreach(_dc_dep IN LISTS _dc_deps)
    string(REPLACE "|" ";" _dc_fields "${_dc_dep}")
    list(GET _dc_fields 0 _dc_name)
    list(GET _dc_fields 1 _dc_version)
    list(GET _dc_fields 2 _dc_package)
    list(GET _dc_fields 3 _dc_extra)
    separate_arguments(_dc_extra UNIX_COMMAND "${_dc_extra}")
    if(_dc_version STREQUAL "-")
      set(_dc_version "")
    endif()
    find_package(${_dc_name} ${_dc_version} QUIET ${_dc_extra})
    if(NOT ${_dc_name}_FOUND)
      string(STRIP "${_dc_name} ${_dc_version}" _dc_what)
      list(APPEND _dc_missing "${_dc_what}")
      list(APPEND _dc_packages ${_dc_package})
    endif()
  endforeach()
  if(_dc_missing)
    string(REPLACE ";" ", " _dc_missing_text "${_dc_missing}")
    string(REPLACE ";" " " _dc_packages_text "${_dc_packages}")
    message(FATAL_ERROR "driftcheck: missing build dependencies: ${_dc_missing_text}; on Debian 12: "
                        "apt-get install ${_dc_packages_text}")
  endif()
endmacro()
