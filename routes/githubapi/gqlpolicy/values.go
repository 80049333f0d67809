package gqlpolicy

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/vektah/gqlparser/v2/ast"
)

// checkVariables checks the variables sent against the operation's
// declarations and returns each declared variable's value: the one sent,
// else its default, else null when its type allows null. A variable sent but
// not declared is ignored, as GitHub ignores it: no value can reach it.
func checkVariables(op *ast.OperationDefinition, sent map[string]any) (map[string]any, error) {
	vars := make(map[string]any, len(op.VariableDefinitions))
	for _, def := range op.VariableDefinitions {
		name := def.Variable
		if _, dup := vars[name]; dup {
			return nil, fmt.Errorf("%w: the variable $%s is declared twice", ErrInvalid, clip(name))
		}
		v, given := sent[name]
		switch {
		case given:
		case def.DefaultValue != nil:
			d, err := literal(def.DefaultValue, nil)
			if err != nil {
				return nil, fmt.Errorf("the default of $%s: %w", clip(name), err)
			}
			v = d
		case def.Type.NonNull:
			return nil, fmt.Errorf("%w: the variable $%s (%s) is not given: send it in variables", ErrInvalid, clip(name), clip(def.Type.String()))
		}
		coerced, err := coerce(v, def.Type)
		if err != nil {
			return nil, fmt.Errorf("%w: the variable $%s: %v", ErrInvalid, clip(name), err)
		}
		vars[name] = coerced
	}
	return vars, nil
}

// coerce checks v, decoded from JSON with numbers as json.Number, against
// the declared type t, as GraphQL's input coercion does: a single value
// stands for a list of one, an ID may be sent as an integer. The types
// GraphQL defines are checked; another (an enum, an input object, GitHub's
// own scalars) is not known without GitHub's schema and is taken as sent.
func coerce(v any, t *ast.Type) (any, error) {
	if v == nil {
		if t.NonNull {
			return nil, fmt.Errorf("null does not fit the non-null type %s", clip(t.String()))
		}
		return nil, nil
	}
	if t.Elem != nil {
		list, ok := v.([]any)
		if !ok {
			one, err := coerce(v, t.Elem)
			if err != nil {
				return nil, err
			}
			return []any{one}, nil
		}
		out := make([]any, len(list))
		for i, e := range list {
			c, err := coerce(e, t.Elem)
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", i, err)
			}
			out[i] = c
		}
		return out, nil
	}
	bad := fmt.Errorf("a %s does not fit the type %s", jsonKind(v), clip(t.NamedType))
	switch t.NamedType {
	case "String":
		if _, ok := v.(string); !ok {
			return nil, bad
		}
	case "ID":
		switch x := v.(type) {
		case string:
		case json.Number:
			if _, err := strconv.ParseInt(x.String(), 10, 64); err != nil {
				return nil, bad
			}
			return x.String(), nil
		default:
			return nil, bad
		}
	case "Int":
		n, ok := v.(json.Number)
		if !ok {
			return nil, bad
		}
		if _, err := strconv.ParseInt(n.String(), 10, 32); err != nil {
			return nil, bad
		}
	case "Float":
		if _, ok := v.(json.Number); !ok {
			return nil, bad
		}
	case "Boolean":
		if _, ok := v.(bool); !ok {
			return nil, bad
		}
	}
	return v, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	case []any:
		return "list"
	case map[string]any:
		return "object"
	}
	return "null"
}

// literal is the value of a literal argument or default, with each variable
// it names replaced by that variable's checked value: strings, bools, nil,
// json.Number for numbers, []any and map[string]any, the same kinds a
// variable decoded from JSON has. vars nil means no variable may appear
// (a default). A variable not declared is refused, and an object with the
// same field twice, since GitHub might read either.
func literal(v *ast.Value, vars map[string]any) (any, error) {
	switch v.Kind {
	case ast.Variable:
		val, ok := vars[v.Raw]
		if !ok {
			return nil, fmt.Errorf("%w: the variable $%s is used but not declared: declare it in the operation", ErrInvalid, clip(v.Raw))
		}
		return val, nil
	case ast.IntValue, ast.FloatValue:
		return json.Number(v.Raw), nil
	case ast.StringValue, ast.BlockValue, ast.EnumValue:
		return v.Raw, nil
	case ast.BooleanValue:
		return v.Raw == "true", nil
	case ast.NullValue:
		return nil, nil
	case ast.ListValue:
		out := make([]any, 0, len(v.Children))
		for _, c := range v.Children {
			e, err := literal(c.Value, vars)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	case ast.ObjectValue:
		out := make(map[string]any, len(v.Children))
		for _, c := range v.Children {
			if _, dup := out[c.Name]; dup {
				return nil, fmt.Errorf("%w: the field %s appears twice in one input object", ErrInvalid, clip(c.Name))
			}
			e, err := literal(c.Value, vars)
			if err != nil {
				return nil, err
			}
			out[c.Name] = e
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: a value of unknown kind", ErrInvalid)
}
