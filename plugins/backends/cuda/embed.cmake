# Embeds a text file as a NUL-terminated C array: cmake -DIN=f -DOUT=f.c -DNAME=symbol -P embed.cmake
# The array goes to a file of its own first and is renamed onto OUT: when several targets list OUT
# (a plugin and its NVRTC check), a parallel build may run this command for each at once, and a
# compiler must never read a half-written OUT (it did: an empty object, weft_cuda_core_source
# undefined at cuda_gemv_bench's link).
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
string(RANDOM LENGTH 12 tag)
file(WRITE ${OUT}.${tag}.tmp "/* generated from ${IN} */\nconst char ${NAME}[] = {${hex}0x00};\n")
file(RENAME ${OUT}.${tag}.tmp ${OUT})
