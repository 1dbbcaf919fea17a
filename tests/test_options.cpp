// Tests of option schemas (core/config/options.h): validation messages name the key path, command-line parsing
// keeps each option's type, and the schema's defaults and JSON description.
#include <QTest>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "core/config/options.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_options {

using namespace routelab;
using nlohmann::json;

namespace {

OptionSchema model_schema() {
  OptionSchema s;
  s.push_back({"n_layer", OptionType::Int, 4, "transformer blocks", 1.0, 64.0, {}});
  s.push_back({"dropout", OptionType::Float, 0.0, "dropout probability", 0.0, 1.0, {}});
  s.push_back({"lr", OptionType::Float, 3e-4, "peak learning rate", 0.0, std::nullopt, {}});
  s.push_back({"bias", OptionType::Bool, false, "bias in linear layers", std::nullopt, std::nullopt, {}});
  s.push_back({"name", OptionType::String, "tiny", "display name", std::nullopt, std::nullopt, {}});
  s.push_back({"norm", OptionType::Choice, "rmsnorm", "normalisation", std::nullopt, std::nullopt,
               {"layernorm", "rmsnorm"}});
  s.push_back({"routed_layers", OptionType::IntList, json::array({1, 3}), "layers with a router", 0.0, 11.0, {}});
  return s;
}

/// The ConfigError message of `fn`, or "" when it does not throw one.
QString config_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return QString::fromUtf8(e.what());
  }
  return {};
}

}  // namespace

class TestOptions : public QObject {
  Q_OBJECT

 private slots:
  void validSectionPasses() {
    const OptionSchema schema = model_schema();
    validate_section(schema_defaults(schema), schema, "model");
    validate_section(json::object(), schema, "model");
    validate_section({{"n_layer", 8}, {"norm", "layernorm"}, {"routed_layers", json::array()}}, schema, "model");
  }

  void invalidSectionThrows_data() {
    QTest::addColumn<QString>("section");  // JSON text
    QTest::addColumn<QString>("expected");  // a part of the message
    QTest::newRow("not an object") << "[1]" << "model: expected an object";
    QTest::newRow("unknown key") << R"({"n_layers": 4})" << "model.n_layers: unknown key";
    QTest::newRow("int as string") << R"({"n_layer": "4"})" << "model.n_layer: expected an integer";
    QTest::newRow("int as bool") << R"({"n_layer": true})" << "model.n_layer: expected an integer";
    QTest::newRow("fractional int") << R"({"n_layer": 4.5})" << "model.n_layer: expected an integer, got 4.5";
    QTest::newRow("float as string") << R"({"dropout": "0.1"})" << "model.dropout: expected a number";
    QTest::newRow("bool as int") << R"({"bias": 1})" << "model.bias: expected true or false";
    QTest::newRow("string as number") << R"({"name": 3})" << "model.name: expected a string";
    QTest::newRow("int below min") << R"({"n_layer": 0})" << "model.n_layer: 0 is below the minimum 1";
    QTest::newRow("int above max") << R"({"n_layer": 65})" << "model.n_layer: 65 is above the maximum 64";
    QTest::newRow("float below min") << R"({"dropout": -0.5})" << "model.dropout: -0.5 is below the minimum 0";
    QTest::newRow("float above max") << R"({"dropout": 1.5})" << "model.dropout: 1.5 is above the maximum 1";
    QTest::newRow("choice not listed") << R"({"norm": "batchnorm"})"
                                       << "model.norm: 'batchnorm' is not one of layernorm, rmsnorm";
    QTest::newRow("choice not a string") << R"({"norm": 1})" << "model.norm: expected a string";
    QTest::newRow("list not a list") << R"({"routed_layers": 3})" << "model.routed_layers: expected a list";
    QTest::newRow("list element type") << R"({"routed_layers": [1, "x"]})"
                                       << "model.routed_layers[1]: expected an integer";
    QTest::newRow("list element fraction") << R"({"routed_layers": [1, 2.5]})"
                                           << "model.routed_layers[1]: expected an integer, got 2.5";
    QTest::newRow("list element above max") << R"({"routed_layers": [1, 3, 12]})"
                                            << "model.routed_layers[2]: 12 is above the maximum 11";
    QTest::newRow("list element below min") << R"({"routed_layers": [-1]})"
                                            << "model.routed_layers[0]: -1 is below the minimum 0";
  }

  void invalidSectionThrows() {
    QFETCH(QString, section);
    QFETCH(QString, expected);
    const OptionSchema schema = model_schema();
    const json value = json::parse(section.toStdString());
    const QString message = config_error([&] { validate_section(value, schema, "model"); });
    QVERIFY2(!message.isEmpty(), "no ConfigError");
    QVERIFY2(message.contains(expected), qPrintable(message));
  }

  void intAcceptsIntegralFloats_data() {
    QTest::addColumn<double>("value");
    QTest::addColumn<bool>("accepted");
    QTest::newRow("4.0") << 4.0 << true;
    QTest::newRow("4.5") << 4.5 << false;
    QTest::newRow("1e1") << 1e1 << true;
    QTest::newRow("inf") << std::numeric_limits<double>::infinity() << false;
    QTest::newRow("nan") << std::numeric_limits<double>::quiet_NaN() << false;
  }

  void intAcceptsIntegralFloats() {
    QFETCH(double, value);
    QFETCH(bool, accepted);
    const OptionSchema schema = model_schema();
    const OptionSpec* spec = find_option(schema, "n_layer");
    QVERIFY(spec);
    const QString message = config_error([&] { validate_value(json(value), *spec, "model.n_layer"); });
    QCOMPARE(message.isEmpty(), accepted);
    if (!accepted) QVERIFY2(message.startsWith("model.n_layer: "), qPrintable(message));
  }

  void floatRejectsNonFinite() {
    const OptionSchema schema = model_schema();
    const QString message = config_error(
        [&] { validate_value(json(std::numeric_limits<double>::infinity()), *find_option(schema, "lr"), "train.lr"); });
    QVERIFY2(message.contains("train.lr: expected a finite number"), qPrintable(message));
  }

  void parseValue_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("expected");  // JSON text of the parsed value
    QTest::newRow("int") << "n_layer" << "4" << "4";
    QTest::newRow("int from 8.0") << "n_layer" << "8.0" << "8";
    QTest::newRow("float") << "lr" << "3e-4" << "0.0003";
    QTest::newRow("float from int text") << "dropout" << "1" << "1";
    QTest::newRow("bool true") << "bias" << "true" << "true";
    QTest::newRow("bool false") << "bias" << "false" << "false";
    QTest::newRow("int list") << "routed_layers" << "[1,3]" << "[1,3]";
    QTest::newRow("empty int list") << "routed_layers" << "[]" << "[]";
    QTest::newRow("string") << "name" << "llama" << "\"llama\"";
    QTest::newRow("string of digits") << "name" << "42" << "\"42\"";
    QTest::newRow("choice") << "norm" << "layernorm" << "\"layernorm\"";
  }

  void parseValue() {
    QFETCH(QString, key);
    QFETCH(QString, text);
    QFETCH(QString, expected);
    const OptionSchema schema = model_schema();
    const OptionSpec* spec = find_option(schema, key.toStdString());
    QVERIFY(spec);
    const json value = parse_value(text.toStdString(), *spec, "model." + key.toStdString());
    QCOMPARE(value.dump(), json::parse(expected.toStdString()).dump());  // dump() tells 8 from 8.0
    if (spec->type == OptionType::Int) QVERIFY(value.is_number_integer());
    if (spec->type == OptionType::Float) QVERIFY(value.is_number());
    if (spec->type == OptionType::Bool) QVERIFY(value.is_boolean());
    if (spec->type == OptionType::String || spec->type == OptionType::Choice) QVERIFY(value.is_string());
    if (spec->type == OptionType::IntList) QVERIFY(value.is_array());
  }

  void parseValueRejects_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("expected");
    QTest::newRow("int 4.5") << "n_layer" << "4.5" << "model.n_layer: expected an integer";
    QTest::newRow("int garbage") << "n_layer" << "four" << "model.n_layer: cannot parse 'four' as int";
    QTest::newRow("int out of range") << "n_layer" << "100" << "model.n_layer: 100 is above the maximum 64";
    QTest::newRow("bool yes") << "bias" << "yes" << "model.bias: cannot parse 'yes' as bool";
    QTest::newRow("bool 1") << "bias" << "1" << "model.bias: expected true or false";
    QTest::newRow("float garbage") << "lr" << "3e-" << "model.lr: cannot parse '3e-' as float";
    QTest::newRow("list unclosed") << "routed_layers" << "[1,3" << "model.routed_layers: cannot parse";
    QTest::newRow("list element") << "routed_layers" << "[1,x]" << "model.routed_layers: cannot parse";
    QTest::newRow("list element range") << "routed_layers" << "[1,30]"
                                        << "model.routed_layers[1]: 30 is above the maximum 11";
    QTest::newRow("choice") << "norm" << "batchnorm" << "'batchnorm' is not one of layernorm, rmsnorm";
  }

  void parseValueRejects() {
    QFETCH(QString, key);
    QFETCH(QString, text);
    QFETCH(QString, expected);
    const OptionSchema schema = model_schema();
    const OptionSpec* spec = find_option(schema, key.toStdString());
    QVERIFY(spec);
    const QString message =
        config_error([&] { parse_value(text.toStdString(), *spec, "model." + key.toStdString()); });
    QVERIFY2(!message.isEmpty(), "no ConfigError");
    QVERIFY2(message.contains(expected), qPrintable(message));
  }

  void schemaDefaults() {
    const json defaults = schema_defaults(model_schema());
    QVERIFY(defaults.is_object());
    QCOMPARE(defaults.size(), std::size_t(7));
    QCOMPARE(defaults["n_layer"].dump(), json(4).dump());
    QCOMPARE(defaults["lr"].dump(), json(3e-4).dump());
    QCOMPARE(defaults["bias"].dump(), json(false).dump());
    QCOMPARE(defaults["name"].dump(), json("tiny").dump());
    QCOMPARE(defaults["norm"].dump(), json("rmsnorm").dump());
    QCOMPARE(defaults["routed_layers"].dump(), json::array({1, 3}).dump());
    QVERIFY(schema_defaults({}).empty());
  }

  void schemaToJson() {
    const json out = schema_to_json(model_schema());
    QVERIFY(out.is_array());
    QCOMPARE(out.size(), std::size_t(7));
    const json& n_layer = out[0];
    QCOMPARE(n_layer["key"].dump(), json("n_layer").dump());
    QCOMPARE(n_layer["type"].dump(), json("int").dump());
    QCOMPARE(n_layer["default"].dump(), json(4).dump());
    QCOMPARE(n_layer["help"].dump(), json("transformer blocks").dump());
    QCOMPARE(n_layer["min"].get<double>(), 1.0);
    QCOMPARE(n_layer["max"].get<double>(), 64.0);
    QVERIFY(!n_layer.contains("choices"));

    const json& lr = out[2];
    QVERIFY(lr.contains("min"));
    QVERIFY(!lr.contains("max"));  // unbounded above

    const json& bias = out[3];
    QCOMPARE(bias["type"].dump(), json("bool").dump());
    QVERIFY(!bias.contains("min") && !bias.contains("max") && !bias.contains("choices"));

    const json& norm = out[5];
    QCOMPARE(norm["type"].dump(), json("choice").dump());
    QCOMPARE(norm["choices"].dump(), json::array({"layernorm", "rmsnorm"}).dump());

    QCOMPARE(out[6]["type"].dump(), json("int_list").dump());
    QCOMPARE(out[6]["max"].get<double>(), 11.0);
  }

  void typeNames_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<QString>("name");
    QTest::newRow("int") << int(OptionType::Int) << "int";
    QTest::newRow("float") << int(OptionType::Float) << "float";
    QTest::newRow("bool") << int(OptionType::Bool) << "bool";
    QTest::newRow("string") << int(OptionType::String) << "string";
    QTest::newRow("choice") << int(OptionType::Choice) << "choice";
    QTest::newRow("int_list") << int(OptionType::IntList) << "int_list";
  }

  void typeNames() {
    QFETCH(int, type);
    QFETCH(QString, name);
    QCOMPARE(QString::fromStdString(to_string(static_cast<OptionType>(type))), name);
  }

  void findOption() {
    const OptionSchema schema = model_schema();
    QVERIFY(find_option(schema, "norm"));
    QCOMPARE(find_option(schema, "norm")->choices.size(), std::size_t(2));
    QVERIFY(!find_option(schema, "Norm"));
    QVERIFY(!find_option(schema, ""));
  }
};

}  // namespace test_options

ROUTELAB_TEST_SUITE(test_options, TestOptions)
#include "test_options.moc"
