# The sources of titan's readers of outside input, which the sanitizer and
# libFuzzer builds compile again, instrumented, into their programs (the
# rest of titan comes from libtitan.so). Set TITAN_SOURCE_DIR first.
set(_lib ${TITAN_SOURCE_DIR}/lib/titan)
set(TITAN_READER_SOURCES
    ${_lib}/config/aliases.cpp ${_lib}/config/cli_overrides.cpp ${_lib}/config/schema.cpp
    ${_lib}/config/suggest.cpp ${_lib}/config/supported.cpp ${_lib}/config/toml_loader.cpp
    ${_lib}/config/torchtitan.cpp ${_lib}/config/torchtitan_keys.cpp ${_lib}/config/validate.cpp
    ${_lib}/data/base64.cpp ${_lib}/data/byte_level.cpp ${_lib}/data/documents.cpp
    ${_lib}/data/hf_tokenizer.cpp ${_lib}/data/hf_tokenizer_json.cpp ${_lib}/data/line_reader.cpp
    ${_lib}/data/load_tokenizer.cpp ${_lib}/data/pretokenize.cpp ${_lib}/data/tiktoken_tokenizer.cpp
    ${_lib}/data/unicode.cpp ${_lib}/data/unicode_table.cpp
    ${_lib}/checkpoint/safetensors.cpp ${_lib}/checkpoint/file_io.cpp ${_lib}/checkpoint/hf_config.cpp
    ${_lib}/checkpoint/dcp.cpp ${_lib}/util/files.cpp)
