# Embeds a text file as a NUL-terminated C array: cmake -DIN=f -DOUT=f.c -DNAME=symbol -P embed.cmake
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
file(WRITE ${OUT} "/* generated from ${IN} */\nconst char ${NAME}[] = {${hex}0x00};\n")
