# driftcheck_target_defaults(<target>): the project's warning set and, when asked for, the sanitizers (or the
# libFuzzer instrumentation: coverage for the fuzzer plus ASan and UBSan, on every target the fuzz targets link).
# Applied per target (no global flags) so that imported targets and third-party headers keep their own settings.
function(driftcheck_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wpedantic -Wshadow>)
  if(DRIFTCHECK_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:C,CXX>:-Werror>)
  endif()
  if(DRIFTCHECK_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(DRIFTCHECK_LIBFUZZER)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()
