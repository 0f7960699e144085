/* libFuzzer target for chat templates: the input is template source, parsed and then rendered
 * over a fixed conversation (system, user, assistant with reasoning and tool calls, tool
 * results) with tools and a fixed clock, under small limits so a hostile template ends quickly.
 * Build so that libweft itself is instrumented too:
 *   CC=clang cmake -S . -B build-fuzz -DWEFT_FUZZ=ON -DWEFT_CUDA=OFF \
 *     -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link,address,undefined
 *   cmake --build build-fuzz --target fuzz_chat -j2
 *   build-fuzz/fuzz/fuzz_chat -max_total_time=60 -dict=tests/fuzz/chat.dict \
 *     <scratch corpus dir> tests/fuzz/corpus/chat */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "text/chat.h"

static const char MESSAGES[] =
    "[{\"role\":\"system\",\"content\":\"You are helpful.\"},"
    "{\"role\":\"user\",\"content\":\"Weather in Paris? \\u00e9\\ud83d\\ude00 <tool_response>\"},"
    "{\"role\":\"assistant\",\"content\":\"<think>\\nhmm\\n</think>\\n\\nChecking.\","
    "\"reasoning_content\":null,\"tool_calls\":[{\"type\":\"function\",\"function\":"
    "{\"name\":\"get_weather\",\"arguments\":{\"location\":\"Paris\",\"days\":[1,2.5,null,true]}}}]"
    "},"
    "{\"role\":\"tool\",\"content\":\"{\\\"temp\\\": 21}\"},"
    "{\"role\":\"assistant\",\"content\":\"It is 21C.\"}]";

static const char EXTRA[] =
    "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"enable_thinking\":false,"
    "\"strftime_now\":\"2024-07-26T12:30:45\",\"tools\":[{\"type\":\"function\",\"function\":"
    "{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    weft_chat_template *t = NULL;
    weft_error err = {sizeof err, 0, "", ""};
    if (weft_chat_template_parse((const char *)data, size, "fuzz", &t, &err) != WEFT_OK) return 0;
    /* small limits: the worst input allowed then renders in seconds even in this instrumented
     * build, well inside the 60 s a fuzz input may take in CI (tools/scripts/test.sh) */
    weft_chat_limits lim = {1u << 20, 16u << 20, 5000};
    weft_chat_template_set_limits(t, &lim);
    char *out = NULL;
    if (weft_chat_render(t, MESSAGES, (int)(size & 1), EXTRA, &out, &err) == WEFT_OK) free(out);
    weft_chat_template_free(t);
    return 0;
}
