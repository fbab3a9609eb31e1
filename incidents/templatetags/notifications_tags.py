from django import template

from incidents.models import Delivery

register = template.Library()


@register.simple_tag
def incident_deliveries(incident) -> list[Delivery]:
    """The incident page's notification section: its deliveries, latest first."""
    return list(Delivery.objects.filter(incident=incident).select_related("endpoint")[:100])
