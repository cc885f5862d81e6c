# Writes OUT (usp_version.h) with the commit the sources are at, rewriting it only
# when that changes. Run at every build (tools/CMakeLists.txt), so that
# `usp --version` names the commit that was built, not the one last configured.
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown: not built from a git checkout")
endif()
file(WRITE "${OUT}.new" "#define USP_COMMIT \"${commit}\"\n")
file(COPY_FILE "${OUT}.new" "${OUT}" ONLY_IF_DIFFERENT)
