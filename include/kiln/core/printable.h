// Text from a file Kiln did not write (a spec's names, a store's rows, a recording) as it may reach a terminal.
#pragma once

#include <string>

namespace kiln {

// `s` with every control byte (C0, DEL) written as \xNN, and the C1 controls and Unicode bidirectional
// overrides as \uNNNN: a name cannot move the cursor, retitle the terminal, forge a line or reorder the text.
// Everything else, including other UTF-8, is kept.
std::string printable(const std::string& s);

// As printable(), but a line break stays one: for a message of several lines (an error that quotes a
// library's report). A NUL, an escape sequence or a carriage return inside is still written as \xNN.
std::string printable_lines(const std::string& s);

}  // namespace kiln
