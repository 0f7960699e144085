# Embeds a text file as a NUL-terminated C array: cmake -DIN=f -DOUT=f.c -DNAME=symbol
# [-DINCLUDE_DIR=d] -P embed.cmake
# NVRTC gets one source text and no include path, so every line `#include "name"` of IN is
# replaced by the text of INCLUDE_DIR/name (one level: the included files include nothing). The
# .cu files keep their #include lines, so nvcc compiles them as they are with -I INCLUDE_DIR.
# The array goes to a file of its own first and is renamed onto OUT: when several targets list OUT
# (a plugin and its NVRTC check), a parallel build may run this command for each at once, and a
# compiler must never read a half-written OUT (it did: an empty object, weft_cuda_core_source
# undefined at cuda_gemv_bench's link).
file(READ ${IN} text)
string(REGEX MATCHALL "#include \"[^\"\n]+\"" includes "${text}")
foreach(line IN LISTS includes)
  string(REGEX REPLACE "#include \"([^\"\n]+)\"" "\\1" name "${line}")
  if(NOT DEFINED INCLUDE_DIR OR NOT EXISTS ${INCLUDE_DIR}/${name})
    message(FATAL_ERROR "${IN}: ${line}: no such file in INCLUDE_DIR '${INCLUDE_DIR}'")
  endif()
  file(READ ${INCLUDE_DIR}/${name} body)
  string(REPLACE "${line}" "// ---- ${name}, inlined at build time ----\n${body}" text "${text}")
endforeach()
string(HEX "${text}" hex)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
string(RANDOM LENGTH 12 tag)
file(WRITE ${OUT}.${tag}.tmp "/* generated from ${IN} */\nconst char ${NAME}[] = {${hex}0x00};\n")
file(RENAME ${OUT}.${tag}.tmp ${OUT})
