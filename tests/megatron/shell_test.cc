// The launch-script interpreter, construct by construct. Expected words are what bash 5.2 passes
// (checked by running each script under bash with the commands replaced by a printer).
#include "megatron/shell.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.h"

namespace ptdp {
namespace {

using Words = std::vector<std::string>;

ShellResult Interpret(std::string_view text, const ShellOptions& options = {}) {
  return InterpretShell(text, "launch.sh", options);
}

Words WordsOf(const ShellCommand& c) {
  Words out;
  for (const ShellWord& w : c.words) out.push_back(w.text);
  return out;
}

// Every listed command's words.
std::vector<Words> Commands(const ShellResult& r) {
  std::vector<Words> out;
  for (const ShellCommand& c : r.commands) out.push_back(WordsOf(c));
  return out;
}

// The words of the only command the text lists.
Words Only(std::string_view text, const ShellOptions& options = {}) {
  const ShellResult r = Interpret(text, options);
  EXPECT_EQ(r.commands.size(), 1u) << text;
  return r.commands.empty() ? Words{} : WordsOf(r.commands[0]);
}

const ShellNote* FindNote(const ShellResult& r, std::string_view part) {
  for (const ShellNote& n : r.notes) {
    if (n.message.find(part) != std::string::npos) return &n;
  }
  return nullptr;
}

// The InputError's what(), or "" when none is thrown.
std::string ErrorOf(std::string_view text, const ShellOptions& options = {}) {
  try {
    Interpret(text, options);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// ---- Lines, separators, comments, redirections ----------------------------------------------

TEST(Shell, NewlinesSemicolonsAndListsSeparateCommands) {
  EXPECT_EQ(Commands(Interpret("a 1; b 2\nc 3 && d 4 || e 5")),
            (std::vector<Words>{{"a", "1"}, {"b", "2"}, {"c", "3"}, {"d", "4"}}));
}

TEST(Shell, BackslashNewlineContinuesTheCommand) {
  const ShellResult r = Interpret("torchrun \\\n  --nnodes 2 \\\n  train.py");
  ASSERT_EQ(r.commands.size(), 1u);
  EXPECT_EQ(WordsOf(r.commands[0]), (Words{"torchrun", "--nnodes", "2", "train.py"}));
  EXPECT_EQ(r.commands[0].line, 1);
  EXPECT_EQ(r.commands[0].words[3].line, 3);
}

TEST(Shell, CommentsStartOnlyAtAWordStart) {
  EXPECT_EQ(Only("cmd a#b # the rest\n# a comment line"), (Words{"cmd", "a#b"}));
}

TEST(Shell, CommentLinesInsideAContinuedCommandAreSkippedWithOneWarningPerRun) {
  const ShellResult r = Interpret(
      "python train.py \\\n"
      "  # --fp16 \\\n"
      "  # --bf16 \\\n"
      "  --lr 1 \\\n"
      "  # --old\n"
      "  --tail 2");
  // bash would end the command at line 2; the author meant to comment out flags.
  ASSERT_EQ(r.commands.size(), 1u);
  EXPECT_EQ(WordsOf(r.commands[0]), (Words{"python", "train.py", "--lr", "1", "--tail", "2"}));
  ASSERT_EQ(r.notes.size(), 2u);
  EXPECT_TRUE(r.notes[0].warning);
  EXPECT_EQ(r.notes[0].line, 2);
  EXPECT_EQ(r.notes[0].message,
            "comment lines 2-3 inside a command continued with \\ end the command in a real "
            "shell: the flags after them never reach Megatron");
  EXPECT_EQ(r.notes[1].line, 5);
  EXPECT_EQ(r.notes[1].fix,
            "move the comment above the command, or end the line before it without \\");
}

TEST(Shell, PipelinesListEveryCommand) {
  EXPECT_EQ(Commands(Interpret("torchrun t.py 2>&1 | tee log | grep loss")),
            (std::vector<Words>{{"torchrun", "t.py"}, {"tee", "log"}, {"grep", "loss"}}));
}

TEST(Shell, BackgroundCommandsAreListed) {
  EXPECT_EQ(Commands(Interpret("a &\nb")), (std::vector<Words>{{"a"}, {"b"}}));
}

TEST(Shell, RedirectionsAreRemovedFromTheWords) {
  EXPECT_EQ(Only("cmd a >out 2>&1 b <in >>log c &>all 2>/dev/null d>glued 3<&- e"),
            (Words{"cmd", "a", "b", "c", "d", "e"}));
}

TEST(Shell, HeredocBodiesAreSkippedAndTheCommandKept) {
  EXPECT_EQ(Commands(Interpret("sbatch <<EOF\nsrun \"${X}\" --flag\nEOF\n"
                               "cat <<-'END' >f\n\tbody\n\tEND\nafter")),
            (std::vector<Words>{{"sbatch"}, {"cat"}, {"after"}}));
}

TEST(Shell, HereDocumentsAndStringsAreTheCommandsInputExpandedAsInBash) {
  const ShellResult r = Interpret(
      "X=val; A=(1 2)\n"
      "sbatch <<EOF\n"
      "srun --x=${X} \"q\" 'sq' \\$HOME \\\n"
      "  ${A[@]} $((1+2)) $(hostname)\n"
      "EOF\n"
      "cat <<'EOF'\nraw $X\nEOF\n"
      "cat <<-EOF\n\ttabbed $X\n\tEOF\n"
      "cmd <<< \"here $X\"\n"
      "cmd");
  ASSERT_EQ(r.commands.size(), 5u);
  ASSERT_TRUE(r.commands[0].input.has_value());
  EXPECT_EQ(r.commands[0].input->text, "srun --x=val \"q\" 'sq' $HOME   1 2 3 $(hostname)\n");
  EXPECT_EQ(r.commands[0].input->line, 3);
  EXPECT_TRUE(r.commands[0].input->unknown);
  EXPECT_EQ(r.commands[1].input->text, "raw $X\n");
  EXPECT_EQ(r.commands[2].input->text, "tabbed val\n");
  EXPECT_EQ(r.commands[3].input->text, "here val\n");
  EXPECT_FALSE(r.commands[4].input.has_value());
}

// ---- Syntax errors ---------------------------------------------------------------------------

TEST(Shell, UnclosedQuoteIsAnInputErrorNamingItsLine) {
  EXPECT_EQ(ErrorOf("cmd ok\ncmd \"abc\nmore"),
            "launch.sh:2: unclosed \" quote (hint: close it; as written it runs to the end of "
            "the text (quotes and $( may span lines))");
  EXPECT_NE(ErrorOf("cmd 'abc").find("launch.sh:1: unclosed ' quote"), std::string::npos);
}

TEST(Shell, UnclosedArrayIsAnInputErrorNamingItsLine) {
  EXPECT_EQ(ErrorOf("x=1\nARGS=(\n  --a 1\n"),
            "launch.sh:2: unclosed ( array ARGS= (hint: end the array with ); everything after "
            "the ( was read as elements)");
}

TEST(Shell, FiWithoutIfIsAnInputError) {
  EXPECT_EQ(ErrorOf("cmd\nfi"),
            "launch.sh:2: `fi` without a matching `if` (hint: remove it, or add what it closes)");
}

TEST(Shell, IfWithoutFiIsAnInputError) {
  EXPECT_EQ(ErrorOf("if true; then\n  cmd\n"),
            "launch.sh:1: `if` on line 1 has no `fi` (hint: add `fi`)");
}

TEST(Shell, RedirectionWithoutTargetIsAnInputError) {
  // Template placeholders like Megatron's sc21/CONFIG.sh are a syntax error in bash too.
  EXPECT_EQ(ErrorOf("export P=<partition name>\n"),
            "launch.sh:1: syntax error near unexpected token `newline`");
}

// ---- Quoting ---------------------------------------------------------------------------------

TEST(Shell, SingleQuotesAreLiteral) {
  EXPECT_EQ(Only("A=1; cmd '$A \"x\" \\n'"), (Words{"cmd", "$A \"x\" \\n"}));
}

TEST(Shell, DoubleQuotesExpandAndKeepTheirEscapes) {
  EXPECT_EQ(Only(R"(A=1; cmd "$A \$A \"q\" \\ \x ${A}b")"), (Words{"cmd", R"(1 $A "q" \ \x 1b)"}));
}

TEST(Shell, UnquotedBackslashQuotesTheNextCharacter) {
  EXPECT_EQ(Only(R"(cmd a\ b c\"d \$e)"), (Words{"cmd", "a b", "c\"d", "$e"}));
}

TEST(Shell, QuotesSpanLinesAndTheWordKeepsItsFirstLine) {
  const ShellResult r = Interpret("cmd \"one\ntwo\" 'three\nfour' next");
  ASSERT_EQ(r.commands.size(), 1u);
  EXPECT_EQ(WordsOf(r.commands[0]), (Words{"cmd", "one\ntwo", "three\nfour", "next"}));
  EXPECT_EQ(r.commands[0].words[1].line, 1);
  EXPECT_EQ(r.commands[0].words[2].line, 2);
  EXPECT_EQ(r.commands[0].words[3].line, 3);
}

TEST(Shell, AdjacentQuotedAndUnquotedPartsFormOneWord) {
  EXPECT_EQ(Only("A=x; cmd a\"b c\"'d'$A\"\"e"), (Words{"cmd", "ab cdxe"}));
}

TEST(Shell, EmptyQuotesAreAWord) { EXPECT_EQ(Only("cmd '' \"\" x"), (Words{"cmd", "", "", "x"})); }

TEST(Shell, AnsiCQuotingDecodesEscapes) {
  EXPECT_EQ(Only(R"(cmd $'a\tb\n' $'it\'s' $'\x41\101')"), (Words{"cmd", "a\tb\n", "it's", "AA"}));
}

// ---- Assignments -----------------------------------------------------------------------------

TEST(Shell, AssignmentLinesSetVariablesAndAreNotListed) {
  const ShellResult r = Interpret("A=1 B=\"two words\"\ncmd $A $B");
  EXPECT_EQ(Commands(r), (std::vector<Words>{{"cmd", "1", "two", "words"}}));
}

TEST(Shell, ArraysSpanLinesWithComments) {
  const ShellResult r = Interpret(
      "ARGS=(\n"
      "    --num-layers 96   # trailing comment (with parens)\n"
      "    # a whole comment line\n"
      "    --split \"9,1 0\" \\\n"
      "    --fp16\n"
      ")\n"
      "cmd \"${ARGS[@]}\"");
  ASSERT_EQ(r.commands.size(), 1u);
  EXPECT_EQ(WordsOf(r.commands[0]),
            (Words{"cmd", "--num-layers", "96", "--split", "9,1 0", "--fp16"}));
  EXPECT_TRUE(r.notes.empty());  // a comment inside ( ) ends nothing
  // An array element keeps the line it was written on.
  EXPECT_EQ(r.commands[0].words[1].line, 2);
  EXPECT_EQ(r.commands[0].words[4].line, 4);
  EXPECT_EQ(r.commands[0].words[5].line, 5);
}

TEST(Shell, AppendingToArraysAndStrings) {
  EXPECT_EQ(Only("A=(a); A+=(b \"c d\"); B=(x); A+=(\"${B[@]}\"); S=ab; S+=cd; "
                 "cmd \"${A[@]}\" $S"),
            (Words{"cmd", "a", "b", "c d", "x", "abcd"}));
}

TEST(Shell, IndexedArrayElements) {
  EXPECT_EQ(Only("A=([2]=two [5]=five six); A[0]=zero; A[-1]=last; "
                 "cmd \"${A[@]}\" ${#A[@]} \"${A[2]}\" \"${A[1+1]}\""),
            (Words{"cmd", "zero", "two", "five", "last", "4", "two", "two"}));
}

TEST(Shell, ExportedVariablesAreInTheEnvironmentOfLaterCommands) {
  ShellOptions options;
  options.environment = {{"HOME", "/home/u"}};
  const ShellResult r =
      Interpret("export CUDA_DEVICE_MAX_CONNECTIONS=1\nLOCAL=2\nexport LOCAL\ncmd", options);
  ASSERT_EQ(r.commands.size(), 1u);
  EXPECT_EQ(r.commands[0].environment,
            (std::map<std::string, std::string>{
                {"CUDA_DEVICE_MAX_CONNECTIONS", "1"}, {"HOME", "/home/u"}, {"LOCAL", "2"}}));
}

TEST(Shell, InlineAssignmentsAreTheCommandsEnvironmentOnly) {
  const ShellResult r = Interpret("A=old\nA=1 B=$A NCCL_DEBUG=INFO torchrun t.py $A\ncmd $A");
  ASSERT_EQ(r.commands.size(), 2u);
  EXPECT_EQ(WordsOf(r.commands[0]), (Words{"torchrun", "t.py", "old"}));
  EXPECT_EQ(r.commands[0].environment,
            (std::map<std::string, std::string>{{"A", "1"}, {"B", "1"}, {"NCCL_DEBUG", "INFO"}}));
  EXPECT_EQ(WordsOf(r.commands[1]), (Words{"cmd", "old"}));
  EXPECT_TRUE(r.commands[1].environment.empty());
}

TEST(Shell, DeclarationBuiltins) {
  const ShellResult r = Interpret(
      "declare -a L=(x \"y z\")\n"
      "declare -x E=exported\n"
      "readonly R=1\n"
      "R=2\n"
      "typeset -i N=2*3\n"
      "f() { local V=inner; declare D=local; cmd $V $D; }\n"
      "f\n"
      "cmd \"${L[@]}\" $R $N \"$V\" \"$D\"");
  EXPECT_EQ(Commands(r),
            (std::vector<Words>{{"cmd", "inner", "local"}, {"cmd", "x", "y z", "1", "6", "", ""}}));
  EXPECT_EQ(r.commands[1].environment.at("E"), "exported");
  const ShellNote* note = FindNote(r, "R is readonly");
  ASSERT_NE(note, nullptr);
  EXPECT_EQ(note->line, 4);
}

TEST(Shell, ExportDashNAndDeclarePlusXUnexport) {
  const ShellResult r = Interpret("export A=1 B=2\nexport -n A\ndeclare +x B\ndeclare -x C=3\ncmd");
  EXPECT_EQ(r.commands[0].environment, (std::map<std::string, std::string>{{"C", "3"}}));
}

TEST(Shell, UnsetRemovesVariablesElementsAndExports) {
  EXPECT_EQ(Commands(Interpret("export A=1; B=(x y z); unset A 'B[1]'; cmd \"$A\" \"${B[@]}\"")),
            (std::vector<Words>{{"cmd", "", "x", "z"}}));
  EXPECT_TRUE(Interpret("export A=1; unset A; cmd").commands[0].environment.empty());
}

// ---- Expansions ------------------------------------------------------------------------------

TEST(Shell, ParameterDefaultsAlternativesAndAssignments) {
  EXPECT_EQ(Only("E=; S=set; cmd ${U:-d1} ${E:-d2} ${E-d3} \"${U-d4}\" ${S:+alt} ${E:+no} "
                 "${U:=assigned} $U"),
            (Words{"cmd", "d1", "d2", "d4", "alt", "assigned", "assigned"}));
}

TEST(Shell, DefaultWordsSplitUnlessQuoted) {
  EXPECT_EQ(Only("cmd ${U:-a b} ${U:-\"c d\"} \"${U:-e f}\""),
            (Words{"cmd", "a", "b", "c d", "e f"}));
}

TEST(Shell, LengthsOfStringsAndArrays) {
  EXPECT_EQ(Only("S=héllo; A=(1 2 3); cmd ${#S} ${#A[@]} ${#A[*]} ${#U}"),
            (Words{"cmd", "5", "3", "3", "0"}));
}

TEST(Shell, ArrayExpansions) {
  EXPECT_EQ(
      Only("A=(x \"y z\" '' w); cmd ${A[@]} \"${A[@]}\" \"${A[*]}\" ${A[1]} \"${A[-1]}\" "
           "$A"),
      (Words{"cmd", "x", "y", "z", "w", "x", "y z", "", "w", "x y z  w", "y", "z", "w", "x"}));
}

TEST(Shell, UnquotedExpansionsSplitAtBlanksAndEmptyOnesVanish) {
  EXPECT_EQ(Only("V='  a  b\tc\nd  '; E=; cmd $V $E \"$E\" x${V}y"),
            (Words{"cmd", "a", "b", "c", "d", "", "x", "a", "b", "c", "d", "y"}));
}

TEST(Shell, QuotedEmptyArrayIsNoWordButQuotedTextIs) {
  EXPECT_EQ(Only("A=(); cmd \"${A[@]}\" \"x${A[@]}\" \"${A[*]}\" \"${A[@]}\"''"),
            (Words{"cmd", "x", "", ""}));
}

TEST(Shell, PositionalParameters) {
  ShellOptions options;
  options.positional = {"a", "b c", "3", "4", "5", "6", "7", "8", "9", "ten"};
  EXPECT_EQ(Only("cmd $0 $1 \"$2\" ${10} $# \"$@\"", options),
            (Words{"cmd", "launch.sh", "a", "b c", "ten", "10", "a", "b c", "3", "4", "5", "6", "7",
                   "8", "9", "ten"}));
  EXPECT_EQ(Commands(Interpret("set -- x \"y z\"; shift; cmd \"$*\" $#", options)),
            (std::vector<Words>{{"set", "--", "x", "y z"}, {"cmd", "y z", "1"}}));
}

TEST(Shell, MissingScriptArgumentIsOneUnknownWordAndOneNote) {
  ShellOptions options;
  options.positional = {"ckpt"};
  const ShellResult r =
      Interpret("CHECKPOINT=$1\nDATA=$2\ncmd --load $CHECKPOINT --data $DATA \"$2/x\"", options);
  ASSERT_EQ(r.commands.size(), 1u);
  const std::vector<ShellWord>& w = r.commands[0].words;
  EXPECT_EQ(WordsOf(r.commands[0]), (Words{"cmd", "--load", "ckpt", "--data", "$2", "$2/x"}));
  EXPECT_FALSE(w[2].unknown);
  EXPECT_TRUE(w[4].unknown);
  EXPECT_TRUE(w[5].unknown);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_FALSE(r.notes[0].warning);
  EXPECT_EQ(r.notes[0].line, 2);
  EXPECT_EQ(r.notes[0].message,
            "$2 is not given: the script's argument 2 is read as an unknown value");
}

TEST(Shell, MissingScriptArgumentWithADefaultTakesTheDefault) {
  const ShellResult r =
      Interpret("P=${1:-\"checkpoints/llama3_8b_fp8\"}\nQ=${2-x}\ncmd $P $Q ${3:+alt}");
  EXPECT_EQ(Commands(r), (std::vector<Words>{{"cmd", "checkpoints/llama3_8b_fp8", "x"}}));
  EXPECT_TRUE(r.notes.empty());
}

TEST(Shell, FunctionArgumentsAreNotScriptArguments) {
  EXPECT_EQ(Only("f() { cmd \"$1\" $2 $#; }; f only"), (Words{"cmd", "only", "1"}));
}

TEST(Shell, ArithmeticExpansion) {
  EXPECT_EQ(Only("A=8; B=2; cmd $(($A*$B)) $((A/B+1)) $(( (1+2) * -3 )) $((7%3)) $((2**10)) "
                 "$((-7/2)) $((1<2)) $((A==8 && B>5)) $((16#ff)) $((0x10)) $((010)) $((X+1)) "
                 "$((A>B ? A : B)) $((1<<4))"),
            (Words{"cmd", "16", "5", "-9", "1", "1024", "-3", "1", "0", "255", "16", "8", "1", "8",
                   "16"}));
}

TEST(Shell, ArithmeticAssignmentsAndIncrements) {
  EXPECT_EQ(Only("i=0; ((i++)); ((i+=10)); N=$((i*2)); cmd $i $N $((i--)) $i $((++i))"),
            (Words{"cmd", "11", "22", "11", "10", "11"}));
}

TEST(Shell, ArithmeticErrorAbandonsItsLineAsBashDoes) {
  const ShellResult r = Interpret("cmd before\ncmd $((1/0)); cmd same-line\ncmd after");
  EXPECT_EQ(Commands(r), (std::vector<Words>{{"cmd", "before"}, {"cmd", "after"}}));
  const ShellNote* note = FindNote(r, "division by 0");
  ASSERT_NE(note, nullptr);
  EXPECT_EQ(note->line, 2);
}

TEST(Shell, CommandSubstitutionIsNotRunAndTheWordIsUnknown) {
  const ShellResult r =
      Interpret("N=$(nproc)\ncmd --n $N \"$(dirname \"$X\")/ckpt\" `hostname`x ok");
  ASSERT_EQ(r.commands.size(), 1u);
  const std::vector<ShellWord>& w = r.commands[0].words;
  EXPECT_EQ(WordsOf(r.commands[0]),
            (Words{"cmd", "--n", "$(nproc)", "$(dirname \"$X\")/ckpt", "`hostname`x", "ok"}));
  EXPECT_TRUE(w[2].unknown);
  EXPECT_TRUE(w[3].unknown);
  EXPECT_TRUE(w[4].unknown);
  EXPECT_FALSE(w[5].unknown);
}

TEST(Shell, KnownTextAroundAnUnknownPartStillSplits) {
  const ShellResult r =
      Interpret("OPTS=\"--data-path $1 --lr 1e-4 --host $(hostname -f)\"\ncmd $OPTS");
  ASSERT_EQ(r.commands.size(), 1u);
  EXPECT_EQ(WordsOf(r.commands[0]),
            (Words{"cmd", "--data-path", "$1", "--lr", "1e-4", "--host", "$(hostname -f)"}));
  EXPECT_FALSE(r.commands[0].words[1].unknown);
  EXPECT_TRUE(r.commands[0].words[2].unknown);
  EXPECT_TRUE(r.commands[0].words[6].unknown);
}

TEST(Shell, PwdSubstitutionReadsPwd) {
  ShellOptions options;
  options.environment = {{"PWD", "/work/run"}};
  EXPECT_EQ(Only("cmd $(pwd)/data `pwd`", options), (Words{"cmd", "/work/run/data", "/work/run"}));
  EXPECT_TRUE(Interpret("cmd $(pwd)").commands[0].words[1].unknown);
}

TEST(Shell, PatternRemovalReplacementSubstringAndCase) {
  EXPECT_EQ(Only("P=/a/b/c.tar.gz; cmd ${P##*/} ${P%/*} ${P%%.*} ${P#*.} ${P/./_} ${P//\\//:} "
                 "${P:3:3} ${P: -2} ${P^^} \"${P/#\\/a/X}\" \"${P/%gz/bz}\""),
            (Words{"cmd", "c.tar.gz", "/a/b", "/a/b/c", "tar.gz", "/a/b/c_tar.gz", ":a:b:c.tar.gz",
                   "b/c", "gz", "/A/B/C.TAR.GZ", "X/b/c.tar.gz", "/a/b/c.tar.bz"}));
}

TEST(Shell, TildeIsHome) {
  ShellOptions options;
  options.environment = {{"HOME", "/home/u"}};
  EXPECT_EQ(Only("P=~/ckpt:~/b; cmd ~ ~/x \"~\" x~ $P", options),
            (Words{"cmd", "/home/u", "/home/u/x", "~", "x~", "/home/u/ckpt:/home/u/b"}));
}

TEST(Shell, ScalarExpansionsTakeTheLineOfTheExpansion) {
  const ShellResult r = Interpret("N=96\n\ncmd \\\n  --num-layers $N");
  ASSERT_EQ(r.commands.size(), 1u);
  EXPECT_EQ(r.commands[0].words[2].line, 4);
}

// ---- Conditions and control flow ----------------------------------------------------------------

TEST(Shell, IfElifElseWithBracketTests) {
  const std::string script =
      "if [ \"$M\" == \"1.7B\" ]; then cmd small\n"
      "elif [ ${M} == \"3.6B\" ]\n"
      "then\n  cmd medium\n"
      "else cmd other; fi";
  EXPECT_EQ(Only("M=1.7B\n" + script), (Words{"cmd", "small"}));
  EXPECT_EQ(Only("M=3.6B\n" + script), (Words{"cmd", "medium"}));
  EXPECT_EQ(Only("M=1T\n" + script), (Words{"cmd", "other"}));
}

TEST(Shell, DoubleBracketTests) {
  EXPECT_EQ(Commands(Interpret("X=fp8; P='f*'; E=\n"
                               "[[ $X == fp8 ]] && cmd 1\n"
                               "[[ $X == f?8 && -z $E ]] && cmd 2\n"
                               "[[ $X == \"f?8\" ]] || cmd 3\n"
                               "[[ $X == $P ]] && cmd 4\n"
                               "[[ $X == \"$P\" ]] || cmd 5\n"
                               "[[ ! ( $X != fp8 || -n $E ) ]] && cmd 6\n"
                               "[[ 10 -gt 9 && 2+3 -eq 5 && b > a ]] && cmd 7\n"
                               "[[ -v X && ! -v NOPE ]] && cmd 8")),
            (std::vector<Words>{{"cmd", "1"},
                                {"cmd", "2"},
                                {"cmd", "3"},
                                {"cmd", "4"},
                                {"cmd", "5"},
                                {"cmd", "6"},
                                {"cmd", "7"},
                                {"cmd", "8"}}));
}

TEST(Shell, TestCommandFollowsPosixArgumentCounts) {
  EXPECT_EQ(
      Commands(Interpret("[ ] || cmd 1\n[ x ] && cmd 2\n[ -n ] && cmd 3\n[ ! x ] || cmd 4\n"
                         "[ a = a -a b != c ] && cmd 5\n[ a = b -o 1 -lt 2 ] && cmd 6\n"
                         "test 3 -ge 3 && cmd 7\n[ \\( a \\) ] && cmd 8\n[ 010 -eq 10 ] && cmd 9")),
      (std::vector<Words>{{"cmd", "1"},
                          {"cmd", "2"},
                          {"cmd", "3"},
                          {"cmd", "4"},
                          {"cmd", "5"},
                          {"cmd", "6"},
                          {"cmd", "7"},
                          {"cmd", "8"},
                          {"cmd", "9"}}));
}

TEST(Shell, BrokenTestIsFalseWithANoteAsInBash) {
  // An unset variable unquoted in [ ]: bash says "unary operator expected", the test is false.
  const ShellResult r = Interpret("if [ $UNSET == YES ]; then cmd yes; else cmd no; fi");
  EXPECT_EQ(Commands(r), (std::vector<Words>{{"cmd", "no"}}));
  EXPECT_NE(FindNote(r, "unary operator expected"), nullptr);
}

TEST(Shell, AndOrBetweenTests) {
  EXPECT_EQ(Commands(Interpret(
                "T=MOCK; D=real\n"
                "if [[ \"$T\" == \"MOCK\" ]] || [[ \"$D\" == \"MOCK\" ]]; then cmd mock; fi\n"
                "if [ -n \"$T\" ] && [ \"$D\" = mock ]; then cmd no; else cmd yes; fi")),
            (std::vector<Words>{{"cmd", "mock"}, {"cmd", "yes"}}));
}

TEST(Shell, FileTestsAssumeTheFileExistsAndSaySo) {
  const ShellResult r = Interpret("if [ ! -f \"$S\" ]; then\n  echo missing\n  exit 1\nfi\ncmd go");
  EXPECT_EQ(Commands(r), (std::vector<Words>{{"cmd", "go"}}));
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_FALSE(r.notes[0].warning);
  EXPECT_EQ(r.notes[0].line, 1);
  EXPECT_NE(r.notes[0].message.find("assumed the file exists"), std::string::npos);
}

TEST(Shell, UndecidableConditionTakesTheElseBranchWithANote) {
  const ShellResult r = Interpret(
      "if [[ \"$(hostname)\" == node1 ]]; then cmd first\n"
      "else cmd second; fi\n"
      "if grep -q x f; then cmd found; fi\n"
      "[ \"$1\" = x ] && cmd never");
  EXPECT_EQ(Commands(r), (std::vector<Words>{{"cmd", "second"}, {"grep", "-q", "x", "f"}}));
  const ShellNote* first = FindNote(r, "condition on line 1");
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(first->warning);
  EXPECT_NE(first->message.find("`$(hostname)` is not known"), std::string::npos);
  EXPECT_NE(first->message.find("the else branch was taken"), std::string::npos);
  EXPECT_NE(FindNote(r, "condition on line 3"), nullptr);
  EXPECT_NE(FindNote(r, "the command after && on line 4 was not run"), nullptr);
}

TEST(Shell, UndecidableTestBesideADecidingOneIsDecided) {
  EXPECT_EQ(Commands(Interpret("if [[ $1 == a ]] || [[ x == x ]]; then cmd yes; fi\n"
                               "if [[ $1 == a ]] && [[ x == y ]]; then cmd no; else cmd else; fi")),
            (std::vector<Words>{{"cmd", "yes"}, {"cmd", "else"}}));
}

TEST(Shell, ProgramsAreAssumedToSucceedInAndOrLists) {
  const ShellResult r =
      Interpret("mkdir -p logs || {\n  echo failed\n  exit 1\n}\ncd run && cmd go");
  EXPECT_EQ(Commands(r),
            (std::vector<Words>{{"mkdir", "-p", "logs"}, {"cd", "run"}, {"cmd", "go"}}));
  EXPECT_TRUE(r.notes.empty());
}

TEST(Shell, CaseMatchesGlobsAlternativesAndFallThrough) {
  const std::string script =
      "case \"${S}\" in\n"
      "  \"800M\") cmd small ;;\n"
      "  8B|70B) cmd big ;;\n"
      "  *.yaml) cmd yaml ;&\n"
      "  x) cmd fell ;;\n"
      "  *) cmd other\n"
      "esac";
  EXPECT_EQ(Commands(Interpret("S=800M\n" + script)), (std::vector<Words>{{"cmd", "small"}}));
  EXPECT_EQ(Commands(Interpret("S=70B\n" + script)), (std::vector<Words>{{"cmd", "big"}}));
  EXPECT_EQ(Commands(Interpret("S=m.yaml\n" + script)),
            (std::vector<Words>{{"cmd", "yaml"}, {"cmd", "fell"}}));
  EXPECT_EQ(Commands(Interpret("S=q\n" + script)), (std::vector<Words>{{"cmd", "other"}}));
}

TEST(Shell, CaseOnAnUnknownWordTakesNoBranch) {
  const ShellResult r = Interpret("case $1 in\n  a) cmd a ;;\n  *) cmd any ;;\nesac\ncmd after");
  EXPECT_EQ(Commands(r), (std::vector<Words>{{"cmd", "after"}}));
  EXPECT_NE(FindNote(r, "which branch of the case on line 1"), nullptr);
}

TEST(Shell, ForLoopsRunTheirBodyPerWord) {
  EXPECT_EQ(Commands(Interpret("L=\"x y\"\nfor v in a \"b c\" $L; do cmd $v; done\n"
                               "for i in 1 2 3 4; do\n  if [ $i -eq 2 ]; then continue; fi\n"
                               "  if [ $i -eq 4 ]; then break; fi\n  cmd $i\ndone")),
            (std::vector<Words>{{"cmd", "a"},
                                {"cmd", "b", "c"},
                                {"cmd", "x"},
                                {"cmd", "y"},
                                {"cmd", "1"},
                                {"cmd", "3"}}));
}

TEST(Shell, ArithmeticForLoops) {
  EXPECT_EQ(Commands(Interpret("for ((i=0; i<3; i++)); do cmd $i; done")),
            (std::vector<Words>{{"cmd", "0"}, {"cmd", "1"}, {"cmd", "2"}}));
}

TEST(Shell, LoopsStopAfter1000IterationsInAll) {
  std::string words;
  for (int i = 0; i < 600; ++i) words += " w";
  const ShellResult r = Interpret("for a in" + words + "; do cmd; done\nfor b in" + words +
                                  "; do cmd; done\ncmd after");
  EXPECT_EQ(r.commands.size(), 1001u);
  const ShellNote* note = FindNote(r, "was stopped");
  ASSERT_NE(note, nullptr);
  EXPECT_EQ(note->line, 2);
}

TEST(Shell, WhileAndUntilLoopsRunWhileTheirConditionIsKnown) {
  // The loop scripts use to read their own arguments (Megatron-LM's examples/gptoss/02_train.sh).
  ShellOptions options;
  options.positional = {"--checkpoint-path", "ckpt/gpt-oss", "--nodes", "2"};
  const ShellResult r = Interpret(
      "CKPT=none; NODES=1\n"
      "while [[ $# -gt 0 ]]; do\n"
      "  case $1 in\n"
      "    --checkpoint-path) CKPT=\"$2\"; shift 2 ;;\n"
      "    --nodes) NODES=$2; shift 2 ;;\n"
      "    *) shift ;;\n"
      "  esac\n"
      "done\n"
      "i=0; until [ $i -ge 2 ]; do i=$((i+1)); done\n"
      "cmd $CKPT $NODES $i",
      options);
  EXPECT_EQ(Commands(r), (std::vector<Words>{{"cmd", "ckpt/gpt-oss", "2", "2"}}));
  EXPECT_TRUE(r.notes.empty());
  // A condition the interpreter cannot know stops the loop, with a note; an endless one stops
  // at the limit for all loops.
  const ShellResult unknown = Interpret("while [ -n \"$(ls)\" ]; do cmd loop; done\ncmd after");
  EXPECT_EQ(Commands(unknown), (std::vector<Words>{{"cmd", "after"}}));
  EXPECT_NE(FindNote(unknown, "cannot tell whether the `while` loop on line 1 goes on"), nullptr);
  const ShellResult endless = Interpret("while true; do cmd; done\ncmd after");
  EXPECT_EQ(endless.commands.size(), 1001u);
  EXPECT_NE(FindNote(endless, "was stopped"), nullptr);
  const ShellResult select = Interpret("select x in a b; do cmd; done\ncmd after");
  EXPECT_NE(FindNote(select, "the `select` loop on line 1 was not run"), nullptr);
}

// Found by fuzzing (tests/fuzz/corpus/megatron_command/timeout-self-sourcing-tree): a file
// that sources itself several times grows as a tree within the depth limit; the text parsed in
// all is bounded too, so it ends quickly with a note.
TEST(Shell, AFileSourcingItselfSeveralTimesIsBoundedInAll) {
  const std::string script =
      "# " + std::string(100'000, 'x') + "\nsource self\nsource self\nsource self\ncmd\n";
  ShellOptions options;
  options.read_file = [&](const std::string&) -> std::optional<std::string> { return script; };
  const ShellResult r = Interpret(script, options);
  EXPECT_NE(FindNote(r, "more than 1 MiB of text in all"), nullptr);
  EXPECT_LT(r.commands.size(), 100u);
}

TEST(Shell, FunctionsRunWithTheirArguments) {
  const ShellResult r = Interpret(
      "launch() {\n"
      "  local nodes=$1; shift\n"
      "  torchrun --nnodes \"$nodes\" \"$@\"\n"
      "  return 0\n"
      "  cmd never\n"
      "}\n"
      "function other { cmd other \"$#\"; }\n"
      "launch 2 train.py \\\n  --lr 1\nother");
  EXPECT_EQ(Commands(r), (std::vector<Words>{{"torchrun", "--nnodes", "2", "train.py", "--lr", "1"},
                                             {"cmd", "other", "0"}}));
  // Arguments keep the line where the caller wrote them; commands the line in the body.
  EXPECT_EQ(r.commands[0].line, 3);
  EXPECT_EQ(r.commands[0].words[3].line, 8);
  EXPECT_EQ(r.commands[0].words[4].line, 9);
}

TEST(Shell, FunctionCallsStopSixteenDeep) {
  const ShellResult r = Interpret("f() { cmd \"$1\"; f $(( $1 + 1 )); }\nf 1\ncmd after");
  EXPECT_EQ(r.commands.size(), 17u);
  EXPECT_EQ(WordsOf(r.commands[15]), (Words{"cmd", "16"}));
  EXPECT_NE(FindNote(r, "more than 16 deep"), nullptr);
}

TEST(Shell, ExitStopsTheScript) {
  EXPECT_EQ(Commands(Interpret("cmd 1\nf() { exit 1; }\nf\ncmd 2")),
            (std::vector<Words>{{"cmd", "1"}}));
  EXPECT_EQ(Commands(Interpret("( exit 1 )\ncmd 2\nexec torchrun t.py\ncmd 3")),
            (std::vector<Words>{{"cmd", "2"}, {"exec", "torchrun", "t.py"}}));
}

TEST(Shell, SubshellsAndPipelinesDoNotChangeTheScriptsVariables) {
  EXPECT_EQ(Commands(Interpret("A=1; ( A=2 ); { A=3; } | cat >/dev/null; cmd $A")),
            (std::vector<Words>{{"cat"}, {"cmd", "1"}}));
  EXPECT_EQ(Only("A=1; { A=3; }; cmd $A"), (Words{"cmd", "3"}));
}

TEST(Shell, SourceReadsThroughTheCallback) {
  ShellOptions options;
  options.positional = {"top"};
  options.read_file = [](const std::string& path) -> std::optional<std::string> {
    if (path == "conf.sh") return "export TP=8\nARGS=(--tp $TP)\ncmd in-conf \"$1\"";
    return std::nullopt;
  };
  const ShellResult r =
      Interpret("source conf.sh\n. conf.sh given\n. missing.sh\ncmd \"${ARGS[@]}\"", options);
  EXPECT_EQ(Commands(r),
            (std::vector<Words>{
                {"cmd", "in-conf", "top"}, {"cmd", "in-conf", "given"}, {"cmd", "--tp", "8"}}));
  EXPECT_EQ(r.commands[0].source, "conf.sh");
  EXPECT_EQ(r.commands[0].line, 3);
  EXPECT_EQ(r.commands[2].source, "launch.sh");
  EXPECT_EQ(r.commands[2].words[1].source, "conf.sh");  // written in conf.sh, line 2
  EXPECT_EQ(r.commands[2].words[1].line, 2);
  EXPECT_EQ(r.commands[2].environment.at("TP"), "8");
  EXPECT_NE(FindNote(r, "missing.sh could not be read"), nullptr);
}

TEST(Shell, SourceWithoutACallbackIsNoted) {
  const ShellResult r = Interpret("source ./config.sh\ncmd");
  EXPECT_EQ(r.commands.size(), 1u);
  const ShellNote* note = FindNote(r, "./config.sh was not read");
  ASSERT_NE(note, nullptr);
  EXPECT_EQ(note->line, 1);
}

TEST(Shell, SourcedFileWithASyntaxErrorIsSkippedAsInBash) {
  ShellOptions options;
  options.read_file = [](const std::string&) -> std::optional<std::string> {
    return "cmd never\nexport P=<partition>\n";
  };
  const ShellResult r = Interpret(". CONFIG.sh\ncmd after", options);
  EXPECT_EQ(Commands(r), (std::vector<Words>{{"cmd", "after"}}));
  EXPECT_NE(FindNote(r, "CONFIG.sh was not run: CONFIG.sh:2: syntax error"), nullptr);
}

TEST(Shell, SourceNestsAtMostEightDeep) {
  ShellOptions options;
  options.read_file = [](const std::string&) -> std::optional<std::string> {
    return "cmd x\nsource self.sh";
  };
  const ShellResult r = Interpret("source self.sh", options);
  EXPECT_EQ(r.commands.size(), 8u);
  EXPECT_NE(FindNote(r, "sourced files nest more than 8 deep"), nullptr);
}

TEST(Shell, EvalRunsKnownText) {
  EXPECT_EQ(Commands(Interpret("CMD='torchrun \"a b\" c'\neval \"$CMD\"\neval $(make_cmd)")),
            (std::vector<Words>{{"torchrun", "a b", "c"}}));
}

TEST(Shell, EvalWithAnUnknownPartRunsWithThatWordUnknown) {
  // issue 33: `TB=/logs/run_$(date +%s)`, then eval of a command string holding $TB.
  const ShellResult r = Interpret(
      "TB=/logs/run_$(date +%s)\ncmd=\"torchrun t.py --tensorboard-dir $TB --lr 1\"\neval $cmd");
  ASSERT_EQ(r.commands.size(), 1u);
  const std::vector<ShellWord>& w = r.commands[0].words;
  ASSERT_EQ(w.size(), 6u);
  EXPECT_EQ(w[3].text, "/logs/run_$(date +%s)");
  EXPECT_TRUE(w[3].unknown);
  EXPECT_FALSE(w[5].unknown);
  EXPECT_EQ(FindNote(r, "eval was not run"), nullptr);
}

TEST(Shell, SchedulerVariablesUnsetAreUnknownNotEmpty) {
  ShellOptions options;
  options.unknown_when_unset = {"SLURM_"};
  options.environment["SLURM_NTASKS"] = "16";
  const ShellResult r = Interpret(
      "N=${SLURM_NNODES:-1}\ncmd --nnodes $N --tasks $SLURM_NTASKS --other ${OTHER}x", options);
  ASSERT_EQ(r.commands.size(), 1u);
  const std::vector<ShellWord>& w = r.commands[0].words;
  ASSERT_EQ(w.size(), 7u);
  EXPECT_EQ(w[2].text, "$SLURM_NNODES");  // set where the job runs: unknown, not the default
  EXPECT_TRUE(w[2].unknown);
  EXPECT_EQ(w[4].text, "16");  // given
  EXPECT_EQ(w[6].text, "x");   // any other unset variable is empty, as in bash
  EXPECT_EQ(Only("cmd $SLURM_NNODES"), (Words{"cmd"}));  // without the option: empty
}

TEST(Shell, TheScriptsOwnFolderIsPwd) {
  ShellOptions options;
  options.environment["PWD"] = "/work/job";
  for (const char* idiom :
       {"$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)", "$(dirname $0)",
        "$( cd -- \"$( dirname -- \"${BASH_SOURCE[0]}\" )\" &> /dev/null && pwd )", "`dirname $0`",
        "$(dirname $(realpath $0))", "$(cd $(dirname $0); pwd)", "$(pwd)"}) {
    EXPECT_EQ(Only(std::string("D=") + idiom + "\ncmd $D/env.sh", options),
              (Words{"cmd", "/work/job/env.sh"}))
        << idiom;
  }
  EXPECT_EQ(Only("D=$(dirname $1)\ncmd $D", options), (Words{"cmd", "$(dirname $1)"}));
}

TEST(Shell, SeqPrintsItsNumbers) {
  EXPECT_EQ(Commands(Interpret("N=6\nfor pp in $(seq 2 2 $N); do cmd $((12 / pp)); done\n"
                               "cmd $(seq 3)")),
            (std::vector<Words>{{"cmd", "6"}, {"cmd", "3"}, {"cmd", "2"}, {"cmd", "1", "2", "3"}}));
  EXPECT_EQ(Only("cmd \"$(seq 3 -1 2)\" $(seq $1)"), (Words{"cmd", "3\n2", "$(seq $1)"}));
}

TEST(Shell, OrdinaryBuiltinsAreListed) {
  EXPECT_EQ(Commands(Interpret("set -ex\ncd /tmp\necho hi\nprintf '%s' x\nmkdir -p d")),
            (std::vector<Words>{{"set", "-ex"},
                                {"cd", "/tmp"},
                                {"echo", "hi"},
                                {"printf", "%s", "x"},
                                {"mkdir", "-p", "d"}}));
}

// ---- Limits on hostile input ------------------------------------------------------------------

TEST(Shell, MoreThanAMillionWordsIsAnInputError) {
  std::string elements, items;
  for (int i = 0; i < 1001; ++i) elements += " x";
  for (int i = 0; i < 1000; ++i) items += " i";
  EXPECT_NE(ErrorOf("A=(" + elements + ")\nfor i in" + items + "; do cmd \"${A[@]}\"; done")
                .find("more than 1000000 words"),
            std::string::npos);
}

TEST(Shell, ValueOver16MiBIsAnInputError) {
  EXPECT_EQ(ErrorOf("A=xxxxxxxxxxxxxxxx\nfor i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 "
                    "20 21; do\n  A=$A$A\ndone"),
            "launch.sh:3: a variable's value grows past 16 MiB (hint: ptdp reads launch "
            "scripts, not data)");
}

TEST(Shell, ExponentialFunctionCallsHitTheCommandLimit) {
  EXPECT_NE(ErrorOf("f() { f; f; f; f; f; f; f; f; f; f; }\nf").find("more than 100000 commands"),
            std::string::npos);
}

TEST(Shell, DeepNestingIsAnInputError) {
  EXPECT_NE(ErrorOf("cmd " + std::string(5000, '(')).find("syntax error"), std::string::npos);
  std::string nested = "x";
  for (int i = 0; i < 300; ++i) nested = "${U:-" + nested + "}";
  EXPECT_NE(ErrorOf("cmd " + nested).find("nest more than 100 deep"), std::string::npos);
  std::string subshells;
  for (int i = 0; i < 300; ++i) subshells += "( ";
  EXPECT_NE(ErrorOf(subshells).find("nest more than 100 deep"), std::string::npos);
}

TEST(Shell, RecursiveArithmeticIsBounded) {
  const ShellResult r = Interpret("A=A+1\ncmd $((A))\ncmd after");
  EXPECT_EQ(Commands(r), (std::vector<Words>{{"cmd", "after"}}));
  EXPECT_NE(FindNote(r, "A+1: expression recursion level exceeded"), nullptr);
  const std::string parens = std::string(500, '(') + "1" + std::string(500, ')');
  EXPECT_NE(FindNote(Interpret("cmd $((" + parens + "))"), "recursion level exceeded"), nullptr);
}

// ---- Whole scripts, in the style of Megatron-LM's examples
// -----------------------------------------

// examples/gpt3/train_gpt3_175b_distributed.sh: arrays with trailing comments, $(($A*$B)),
// script arguments, an unquoted ${ARR[@]} per group.
TEST(Shell, Gpt3StyleScript) {
  ShellOptions options;
  options.positional = {"/ckpt", "/tb", "vocab.json", "merges.txt", "/data/text_document"};
  const ShellResult r = Interpret(
      "#!/bin/bash\n"
      "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
      "GPUS_PER_NODE=8\n"
      "NUM_NODES=1\n"
      "WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))\n"
      "CHECKPOINT_PATH=$1 #<Specify path>\n"
      "DATA_PATH=$5 #<Specify path and file prefix>_text_document\n"
      "DISTRIBUTED_ARGS=(\n"
      "    --nproc_per_node $GPUS_PER_NODE \n"
      "    --nnodes $NUM_NODES \n"
      ")\n"
      "GPT_MODEL_ARGS=(\n"
      "    --num-layers 96 \n"
      "    --attention-backend auto # Can use (flash/fused/unfused/local)\n"
      ")\n"
      "TRAINING_ARGS=(\n"
      "    --step-batch-size-schedule \"0:16 2.4B:320\"\n"
      "    --fp16\n"
      ")\n"
      "MODEL_PARALLEL_ARGS=(\n"
      "\t--tensor-model-parallel-size 8 \n"
      ")\n"
      "DATA_ARGS=(\n"
      "    --data-path $DATA_PATH \n"
      "    --save $CHECKPOINT_PATH \n"
      ")\n"
      "torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \\\n"
      "    ${GPT_MODEL_ARGS[@]} \\\n"
      "    ${TRAINING_ARGS[@]} \\\n"
      "    ${MODEL_PARALLEL_ARGS[@]} \\\n"
      "    ${DATA_ARGS[@]}\n",
      options);
  ASSERT_EQ(r.commands.size(), 1u);
  EXPECT_EQ(WordsOf(r.commands[0]), (Words{"torchrun",
                                           "--nproc_per_node",
                                           "8",
                                           "--nnodes",
                                           "1",
                                           "pretrain_gpt.py",
                                           "--num-layers",
                                           "96",
                                           "--attention-backend",
                                           "auto",
                                           "--step-batch-size-schedule",
                                           "0:16",
                                           "2.4B:320",
                                           "--fp16",
                                           "--tensor-model-parallel-size",
                                           "8",
                                           "--data-path",
                                           "/data/text_document",
                                           "--save",
                                           "/ckpt"}));
  EXPECT_EQ(r.commands[0].environment,
            (std::map<std::string, std::string>{{"CUDA_DEVICE_MAX_CONNECTIONS", "1"}}));
  EXPECT_EQ(r.commands[0].line, 27);
  EXPECT_EQ(r.commands[0].words[6].line, 13);  // --num-layers, where the array element is
  EXPECT_TRUE(r.notes.empty());
}

// examples/llama/train_llama3_8b_h100_fp8.sh: ${1:-"default"}, if [[ "$X" == "fp8" ]],
// ARR+=( "--fp8-format hybrid" ) split by an unquoted ${ARR[@]}, ARR+=("${B[@]}"), a file test.
TEST(Shell, Llama3Fp8StyleScript) {
  const ShellResult r = Interpret(
      "#!/bin/bash\n"
      "export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}\n"
      "CHECKPOINT_PATH=${1:-\"checkpoints/llama3_8b_fp8\"}\n"
      "TOKENIZER_ARG=${3:-\"MOCK\"} # Path to tokenizer model, or \"MOCK\"\n"
      "mkdir -p \"$(dirname \"$CHECKPOINT_PATH\")\"\n"
      "GPUS_PER_NODE=8\n"
      "NUM_NODES=1\n"
      "WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))\n"
      "PRETRAIN_SCRIPT_PATH=\"pretrain_gpt.py\"\n"
      "DTYPE=\"fp8\"\n"
      "TRAINING_ARGS=(\n"
      "    --micro-batch-size 1\n"
      "    --lr 0.00015\n"
      "    --decoupled-lr 5.0e-4      # Specific to decoupled AdamW\n"
      ")\n"
      "DTYPE_ARGS=()\n"
      "if [[ \"$DTYPE\" == \"fp8\" ]]; then\n"
      "    DTYPE_ARGS+=(\n"
      "        \"--fp8-format hybrid\"\n"
      "        \"--fp8-param-gather\"\n"
      "    )\n"
      "fi\n"
      "DDP_ARGS=(\n"
      "    --use-distributed-optimizer\n"
      "    --overlap-grad-reduce\n"
      ")\n"
      "TRAINING_ARGS+=(\"${DDP_ARGS[@]}\")\n"
      "DATA_ARGS_LIST=()\n"
      "if [[ \"$TOKENIZER_ARG\" == \"MOCK\" ]] || [[ -z \"$TOKENIZER_ARG\" ]]; then\n"
      "    DATA_ARGS_LIST+=(\n"
      "        \"--mock-data\"\n"
      "        \"--split '99,1,0'\"\n"
      "    )\n"
      "else\n"
      "    DATA_ARGS_LIST+=(\"--tokenizer-model $TOKENIZER_ARG\")\n"
      "fi\n"
      "EVAL_ARGS=(\n"
      "    --save \"$CHECKPOINT_PATH\"\n"
      ")\n"
      "if [ ! -f \"$PRETRAIN_SCRIPT_PATH\" ]; then\n"
      "    echo \"Error: pretrain_gpt.py not found\"\n"
      "    exit 1\n"
      "fi\n"
      "torchrun --nproc_per_node $GPUS_PER_NODE \\\n"
      "    \"$PRETRAIN_SCRIPT_PATH\" \\\n"
      "    ${TRAINING_ARGS[@]} \\\n"
      "    ${DTYPE_ARGS[@]} \\\n"
      "    ${DATA_ARGS_LIST[@]} \\\n"
      "    ${EVAL_ARGS[@]}\n"
      "set +x\n");
  ASSERT_EQ(r.commands.size(), 3u);
  EXPECT_EQ(WordsOf(r.commands[0]), (Words{"mkdir", "-p", "$(dirname \"$CHECKPOINT_PATH\")"}));
  EXPECT_TRUE(r.commands[0].words[2].unknown);
  EXPECT_EQ(WordsOf(r.commands[1]), (Words{"torchrun",
                                           "--nproc_per_node",
                                           "8",
                                           "pretrain_gpt.py",
                                           "--micro-batch-size",
                                           "1",
                                           "--lr",
                                           "0.00015",
                                           "--decoupled-lr",
                                           "5.0e-4",
                                           "--use-distributed-optimizer",
                                           "--overlap-grad-reduce",
                                           "--fp8-format",
                                           "hybrid",
                                           "--fp8-param-gather",
                                           "--mock-data",
                                           "--split",
                                           "'99,1,0'",
                                           "--save",
                                           "checkpoints/llama3_8b_fp8"}));
  EXPECT_EQ(r.commands[1].environment.at("CUDA_DEVICE_MAX_CONNECTIONS"), "1");
  EXPECT_EQ(r.commands[1].words[12].line, 19);  // "--fp8-format hybrid", where it is written
  EXPECT_EQ(WordsOf(r.commands[2]), (Words{"set", "+x"}));
  ASSERT_EQ(r.notes.size(), 1u);  // the file test, assumed true
  EXPECT_EQ(r.notes[0].line, 40);
}

}  // namespace
}  // namespace ptdp
